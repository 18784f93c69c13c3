"""The scripted provider with tools: which calls it asks for, with which arguments, and how
it answers from their results — a pure function of the request, so offline loops are real.

**Filling a parameter** ``p`` of a tool's JSON Schema: the conversation is read from its
newest message back, and the first of these wins —

- a JSON object in a message holding key ``p`` (anywhere inside it) with a value of the
  parameter's type: a tool result, user content that parses as JSON, or the arguments of an
  earlier tool call — so a number parameter takes the number a tool returned under that key;
- in a user message's text, ``p: value`` or ``p=value``;
- for a string parameter named ``id`` or ``*_id``, an id-looking token in a user message's
  text (``A-17``, ``#1234``, ``ORD123``);

and, when a tool's only required parameter is a string nothing else filled (and not an id),
the last user message's text. A value must fit the parameter's ``type`` (and ``enum``); a number written
as text is read as a number. Optional parameters are filled when a value is found.

**Each turn**, a tool is *callable* when all its required parameters are filled. The
provider asks for the callable tools not yet called with the same arguments anywhere in the
conversation, in the order offered — all of them unless ``parallel_tool_calls`` is False,
then only the first. ``tool_choice={"name": X}`` asks for X alone (required parameters it
cannot fill get plausible values of their type); ``"required"`` asks for at least one call
on a turn with no tool result since the last user message (the first offered tool when none
is callable); ``"none"`` — or no tools — asks for none. Unlike a real model it never repeats
a call with the same arguments, and stops asking after ``MAX_TOOL_TURNS`` tool-call turns
since the last user message, so every loop ends.

**Answering**: when there is nothing (left) to call, the text opens with the results since
the last user message (``lookup_order: status shipped, total 42.5.``; a failed call is
``refund failed: …``) followed by the scripted prose of ``scripted_text.compose`` — seeded
by the request hash like every scripted answer.

Call ids are ``call_`` + a hash prefix of (request hash, index): deterministic.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

from forklab.engine.canonical import canonical_json
from forklab.engine.providers.base import ChatRequest, Message, ToolCallRequest, ToolDefinition

MAX_TOOL_TURNS = 8
ID_TOKEN = re.compile(r"#\d+|\b[A-Z]{1,6}-\d+\b|\b[A-Z]{2,}\d+\b")
MISSING = object()


def tool_calls(request: ChatRequest) -> tuple[ToolCallRequest, ...]:
    """The calls the scripted model asks for on this turn (see the module docstring)."""
    if not request.offers_tools or _tool_turns_since_user(request.messages) >= MAX_TOOL_TURNS:
        return ()
    done = _calls_made(request.messages)
    forced = request.tool_choice if isinstance(request.tool_choice, dict) else None
    if forced is not None:
        chosen = [t for t in request.tools if t.name == forced.get("name")][:1]
        planned = [(t, fill_arguments(t, request.messages, force=True)) for t in chosen]
    else:
        planned = [(t, args) for t in request.tools
                   if (args := fill_arguments(t, request.messages)) is not None]
    fresh = [(t, a) for t, a in planned if (t.name, canonical_json(a)) not in done]
    if (not fresh and request.tool_choice == "required"
            and not _results_since_user(request.messages)):
        first = request.tools[0]
        fresh = [(first, fill_arguments(first, request.messages, force=True) or {})]
    if request.parallel_tool_calls is False:
        fresh = fresh[:1]
    return tuple(ToolCallRequest(id=_call_id(request.request_hash, i), name=t.name,
                                 arguments=args or {})
                 for i, (t, args) in enumerate(fresh))


def fill_arguments(tool: ToolDefinition, messages: tuple[Message, ...], *,
                   force: bool = False) -> dict[str, Any] | None:
    """The arguments the conversation fills for ``tool``; None when a required one is
    missing (``force``: a plausible value of its type instead)."""
    properties = tool.parameters.get("properties") or {}
    required = [p for p in tool.parameters.get("required") or () if isinstance(p, str)]
    args: dict[str, Any] = {}
    for name, schema in properties.items():
        value = find_value(name, schema if isinstance(schema, dict) else {}, messages)
        if value is not MISSING:
            args[name] = value
    missing = [name for name in required if name not in args]
    if (len(missing) == 1 and len(required) == 1 and not _id_like(missing[0])
            and _type(properties.get(missing[0])) == "string"):
        last = _last_user_text(messages)
        if last:
            args[missing[0]] = last
            missing = []
    if missing and not force:
        return None
    for name in missing:
        args[name] = _placeholder(properties.get(name) or {})
    return args


def find_value(name: str, schema: dict[str, Any], messages: tuple[Message, ...]) -> Any:
    """The newest value the conversation holds for parameter ``name`` (``MISSING`` when
    none fits ``schema``)."""
    for message in reversed(messages):
        for obj in _json_objects(message):
            value = _coerce(_lookup(obj, name), schema)
            if value is not MISSING:
                return value
        if message.get("role") != "user":
            continue
        text = str(message.get("content") or "")
        said = re.search(rf"(?<![\w-]){re.escape(name)}\s*[:=]\s*(\"[^\"]*\"|'[^']*'|[^\s,;]+)",
                         text)
        if said:
            value = _coerce(said.group(1).strip("\"'").rstrip("."), schema)
            if value is not MISSING:
                return value
        if _id_like(name) and _type(schema) in ("string", None):
            token = ID_TOKEN.search(text)
            if token:
                return token.group(0)
    return MISSING


def _id_like(name: str) -> bool:
    return name == "id" or name.endswith("_id")


def _json_objects(message: Message) -> Iterator[dict[str, Any]]:
    """JSON objects a message holds: its content when that parses as one (tool results, user
    content) and the arguments of the tool calls it made."""
    content = message.get("content")
    if message.get("role") in ("tool", "user") and isinstance(content, str):
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        if isinstance(data, dict):
            yield data
    for call in reversed(message.get("tool_calls") or ()):
        if isinstance(call, dict) and isinstance(call.get("arguments"), dict):
            yield call["arguments"]


def _lookup(obj: Any, key: str, depth: int = 0) -> Any:
    """``obj[key]``, else the first ``key`` found in nested objects (breadth first)."""
    if not isinstance(obj, dict) or depth > 4:
        return MISSING
    if key in obj:
        return obj[key]
    for value in obj.values():
        nested = value[0] if isinstance(value, list) and value else value
        found = _lookup(nested, key, depth + 1)
        if found is not MISSING:
            return found
    return MISSING


def _type(schema: Any) -> str | None:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    return kind if isinstance(kind, str) else None


def _coerce(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` as the schema's type, or ``MISSING`` when it does not fit."""
    if value is MISSING or value is None:
        return MISSING
    kind = _type(schema)
    out: Any = MISSING
    if kind in (None, "string"):
        out = value if isinstance(value, str) else (
            str(value) if isinstance(value, int | float) and not isinstance(value, bool)
            else MISSING)
    elif kind in ("number", "integer"):
        out = _number(value, integer=kind == "integer")
    elif kind == "boolean":
        out = value if isinstance(value, bool) else {"true": True, "false": False}.get(
            str(value).lower(), MISSING)
    elif kind == "array":
        out = value if isinstance(value, list) else MISSING
    elif kind == "object":
        out = value if isinstance(value, dict) else MISSING
    enum = schema.get("enum")
    if out is not MISSING and isinstance(enum, list) and out not in enum:
        return MISSING
    return out


def _number(value: Any, *, integer: bool) -> Any:
    if isinstance(value, bool):
        return MISSING
    if isinstance(value, str):
        try:
            value = float(value.replace(",", ""))
        except ValueError:
            return MISSING
    if not isinstance(value, int | float) or value != value or value in (float("inf"),
                                                                         float("-inf")):
        return MISSING
    if integer:
        return int(value) if float(value).is_integer() else MISSING
    return int(value) if isinstance(value, int) else float(value)


def _placeholder(schema: dict[str, Any]) -> Any:
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    return {"string": "", "number": 0, "integer": 0, "boolean": False, "array": [],
            "object": {}}.get(_type(schema) or "string", "")


def _call_id(request_hash: str, index: int) -> str:
    return "call_" + hashlib.sha256(f"{request_hash}:{index}".encode()).hexdigest()[:24]


def _last_user_text(messages: tuple[Message, ...]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user" and message.get("content"):
            return str(message["content"])
    return ""


def _since_user(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return messages[index + 1:]
    return messages


def _tool_turns_since_user(messages: tuple[Message, ...]) -> int:
    return sum(1 for m in _since_user(messages)
               if m.get("role") == "assistant" and m.get("tool_calls"))


def _calls_made(messages: tuple[Message, ...]) -> set[tuple[str, str]]:
    return {(str(call.get("name")), canonical_json(call.get("arguments")))
            for m in messages if m.get("role") == "assistant"
            for call in m.get("tool_calls") or () if isinstance(call, dict)}


def _results_since_user(messages: tuple[Message, ...]) -> list[Message]:
    return [m for m in _since_user(messages) if m.get("role") == "tool"]


def results_summary(messages: tuple[Message, ...]) -> str:
    """One sentence per tool result since the last user message: ``name: key value, …``."""
    names = {call.get("id"): call.get("name") for m in messages
             for call in m.get("tool_calls") or () if isinstance(call, dict)}
    sentences = []
    for result in _results_since_user(messages):
        name = result.get("name") or names.get(result.get("tool_call_id")) or "the tool"
        content = str(result.get("content") or "")
        if result.get("is_error"):
            sentences.append(f"{name} failed: {_clip(content)}.")
        else:
            sentences.append(f"{name}: {_describe(content)}.")
    return " ".join(sentences)


def _describe(content: str) -> str:
    try:
        data = json.loads(content)
    except ValueError:
        return _clip(content) or "no result"
    if isinstance(data, dict):
        scalars = [f"{k.replace('_', ' ')} {v}" for k, v in data.items()
                   if isinstance(v, str | int | float | bool) and not isinstance(v, dict)]
        return ", ".join(scalars[:5]) or f"{len(data)} fields"
    if isinstance(data, list):
        return f"{len(data)} item{'s' if len(data) != 1 else ''}"
    return _clip(str(data))


def _clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split()).rstrip(".")
    return text if len(text) <= limit else text[:limit].rstrip() + "…"
