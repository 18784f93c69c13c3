"""The stub's "model": a reply computed from what was sent, in neither vendor's dialect.

Rules (so a test can predict every reply):

- offered tools (and a tool choice other than none) → it asks for the forced tool
  (``tool_choice`` naming one), else for every offered tool not yet called since the last
  user message whose arguments it can fill from that message — all of them when parallel
  calls are allowed, else the first (``required`` with none fillable: the first offered tool,
  with no arguments). So one tool is one round trip; two tools without parallel calls, two.
  Arguments: a string parameter named ``id`` / ``*_id`` takes the first id-looking token of the
  user's text (``A-17``, ``#1234``, ``ORD123``), another string parameter the whole text, a
  number or integer parameter the first number in it, a boolean ``true``;
- nothing (left) to call, tool results after the last user message → the text ``Results: name=content; …`` quoting
  each result (that is what a test asserts the loop fed back);
- a JSON Schema asked for → a JSON document of that shape (required properties filled from
  the user's text, as arguments are);
- otherwise → ``You said: <last user text>``.

Ids are deterministic: a hash of the request body and the call's index.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

ID_TOKEN = re.compile(r"#\d+|\b[A-Z]{1,5}-?\d+\b")
NUMBER = re.compile(r"(?<![\w.-])-?\d+(?:\.\d+)?")


@dataclass
class Conversation:
    """A request read into neutral form by a vendor module."""

    body: dict[str, Any]
    messages: list[dict[str, Any]]  # neutral: role, content, tool_calls?, tool_call_id?
    tools: list[dict[str, Any]] = field(default_factory=list)  # name, parameters
    choice: str | None = None  # auto | required | none | None (default)
    forced: str | None = None  # a tool the choice names
    parallel: bool = True
    schema: dict[str, Any] | None = None


@dataclass
class Reply:
    text: str
    tool_calls: list[tuple[str, str, dict[str, Any]]]  # (id, name, arguments)
    input_tokens: int
    output_tokens: int


def call_id(body: dict[str, Any], index: int, prefix: str) -> str:
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode() + bytes([index]))
    return f"{prefix}{digest.hexdigest()[:16]}"


def reply(conversation: Conversation, id_prefix: str) -> Reply:
    user = _last_user(conversation.messages)
    calls = _calls(conversation, user)
    text = ""
    if not calls:
        text = _text(conversation, user)
    ids = [call_id(conversation.body, i, id_prefix) for i in range(len(calls))]
    sent = json.dumps(conversation.messages) + json.dumps(conversation.tools)
    return Reply(text=text, tool_calls=[(i, n, a) for i, (n, a) in zip(ids, calls, strict=True)],
                 input_tokens=max(1, len(sent) // 4),
                 output_tokens=max(1, (len(text) + len(json.dumps(calls))) // 4))


def _last_user(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message["role"] == "user" and message.get("content"):
            return str(message["content"])
    return ""


def _results_since_user(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    names = {c["id"]: c["name"] for m in messages for c in m.get("tool_calls") or ()}
    results: list[tuple[str, str]] = []
    for message in messages:
        if message["role"] == "user" and message.get("content"):
            results = []
        elif message["role"] == "tool":
            results.append((names.get(message["tool_call_id"], "?"), str(message["content"])))
    return results


def fill(schema: dict[str, Any], user: str, *, only_required: bool = False,
         ) -> dict[str, Any] | None:
    """Arguments for an object schema from the user's text; None when a required one has
    no value to take."""
    properties = schema.get("properties") or {}
    required = list(schema.get("required") or ())
    args: dict[str, Any] = {}
    for name in required if only_required else list(properties):
        value = _value(name, properties.get(name) or {}, user)
        if value is not None:
            args[name] = value
        elif name in required:
            return None
    return args


def _value(name: str, prop: dict[str, Any], user: str) -> Any:
    kind = prop.get("type", "string")
    if prop.get("enum"):
        return prop["enum"][0]
    if kind == "string":
        if name == "id" or name.endswith("_id"):
            found = ID_TOKEN.search(user)
            return found.group(0) if found else None
        return user or None
    if kind in ("number", "integer"):
        found = NUMBER.search(user)
        if found is None:
            return None
        return int(float(found.group(0))) if kind == "integer" else float(found.group(0))
    if kind == "boolean":
        return True
    if kind == "object":
        return fill(prop, user) or {}
    if kind == "array":
        return []
    return None


def _called_since_user(messages: list[dict[str, Any]]) -> set[str]:
    called: set[str] = set()
    for message in messages:
        if message["role"] == "user" and message.get("content"):
            called = set()
        called.update(c["name"] for c in message.get("tool_calls") or ())
    return called


def _calls(conversation: Conversation, user: str) -> list[tuple[str, dict[str, Any]]]:
    if not conversation.tools or conversation.choice == "none":
        return []
    offered = {t["name"]: t for t in conversation.tools}
    if conversation.forced is not None:
        tool = offered[conversation.forced]
        return [(tool["name"], fill(tool["parameters"], user) or {})]
    called = _called_since_user(conversation.messages)
    fillable = [(t["name"], args) for t in conversation.tools if t["name"] not in called
                and (args := fill(t["parameters"], user)) is not None]
    if not fillable:
        if conversation.choice == "required" and not called:
            return [(conversation.tools[0]["name"], {})]
        return []
    return fillable if conversation.parallel else fillable[:1]


def _text(conversation: Conversation, user: str) -> str:
    if conversation.schema is not None:
        return json.dumps(_document(conversation.schema, user))
    results = _results_since_user(conversation.messages)
    if results:
        return "Results: " + "; ".join(f"{name}={content}" for name, content in results)
    return f"You said: {user}"


def _document(schema: dict[str, Any], user: str) -> Any:
    if schema.get("type") == "object":
        out = {}
        for name, prop in (schema.get("properties") or {}).items():
            value = _value(name, prop, user)
            out[name] = value if value is not None else _blank(prop)
        return out
    return _blank(schema)


def _blank(prop: dict[str, Any]) -> Any:
    return {"string": "", "number": 0, "integer": 0, "boolean": False, "array": [],
            "object": {}}.get(str(prop.get("type")))
