"""Model calls recorded from what a trace captured (SPEC §8 (b)): matched on that part only.

A call forklab recorded itself carries the hash of its whole request (``request_hash``):
every field that can change the answer. A call imported from a trace was seen only through
the instrumentation — the model, the system prompt and messages, the tools offered when it
recorded them, the parameters it recorded — never the whole request body. When such a call
is part of a workflow recording (an imported run mapped to registered code), a fork compares
the request the code now makes with the recorded one **on the captured parts only**: the
recording's ``request_hash`` is a *captured hash* naming those parts and a digest of each::

    captured:messages=3f0c…,model=9a1d…,system=77b2…,tools=e0c4…

so the log says, call by call, what it can be matched on, and any reader (the fork oracle's
prefix check and memo, a label) decides with :func:`request_matches`. A call imported without
its content (*inspect-only*) records :data:`INSPECT_ONLY`, which matches nothing: what was
never seen is never served.

Both sides are normalized alike before hashing (:func:`projection`): messages as role, text,
tool calls (arguments decoded) and the tool call id a tool message answers (the ``name`` a
reader may add to it is left out); a dated model snapshot (``gpt-4.1-mini-2025-04-14``) as
its alias; a ``stop`` string as a one-item list.

This module imports only the call model and the canonical hash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from forklab.engine.calls import call_key
from forklab.engine.canonical import fingerprint
from forklab.engine.errors import CallNotReplayable
from forklab.engine.events import AgentRequested, AnyEvent, ToolCalled, TraceImported
from forklab.engine.providers.base import ChatRequest

PREFIX = "captured:"
INSPECT_ONLY = PREFIX + "inspect-only"
"""The hash of an imported call whose content was not captured: it matches no request."""

SETTINGS = ("tool_choice", "parallel_tool_calls", "response_format")
MAX_TOKENS = ("max_tokens", "max_completion_tokens")
_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_DIGEST = 16


def is_captured(request_hash: str | None) -> bool:
    """Whether ``request_hash`` is a captured hash (the call was recorded from a trace)."""
    return bool(request_hash) and str(request_hash).startswith(PREFIX)


def _decoded(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _text(content: Any) -> Any:
    """Plain text for ``None`` or a content of text parts only; other content as it is."""
    if content is None:
        return ""
    if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    return content


def message_form(message: Mapping[str, Any]) -> dict[str, Any]:
    """One message as both sides can see it: role, text, tool calls, answered call id."""
    role = message.get("role")
    out: dict[str, Any] = {"role": role, "content": _text(message.get("content"))}
    calls = message.get("tool_calls") or ()
    if calls:
        out["tool_calls"] = [{"id": str(c.get("id") or ""), "name": str(c.get("name") or ""),
                              "arguments": _decoded(c.get("arguments"))} for c in calls]
    if role == "tool":
        out["tool_call_id"] = str(message.get("tool_call_id") or "")
    return out


def model_form(model: str) -> str:
    """A model name without a dated snapshot suffix (what the trace's reply may name)."""
    return _DATED.sub("", model)


def param_value(request: ChatRequest, name: str) -> Any:
    """The value the request sends for parameter ``name`` (as a trace names it)."""
    if name in MAX_TOKENS:
        return request.max_tokens
    if name == "stop":
        value = request.params.get("stop", request.params.get("stop_sequences"))
        return [value] if isinstance(value, str) else value
    return request.params.get(name)


def projection(request: ChatRequest, parts: Iterable[str]) -> dict[str, Any]:
    """``request`` reduced to ``parts``: ``model``, ``system``, ``messages``, ``tools``,
    ``temperature``, one of :data:`SETTINGS`, or ``param.<name>`` (:func:`param_value`)."""
    out: dict[str, Any] = {}
    for part in parts:
        if part == "model":
            out[part] = model_form(request.model)
        elif part == "system":
            out[part] = request.system_prompt
        elif part == "messages":
            out[part] = [message_form(m) for m in request.messages]
        elif part == "tools":
            out[part] = [t.to_wire() for t in request.tools]
        elif part == "temperature":
            out[part] = float(request.temperature)
        elif part in SETTINGS:
            out[part] = getattr(request, part)
        elif part.startswith("param."):
            out[part] = param_value(request, part.removeprefix("param."))
        else:
            raise ValueError(f"unknown captured part {part!r}")
    return out


def captured_hash(view: Mapping[str, Any]) -> str:
    """The captured hash of a projection (:func:`projection`'s result, or a trace's own)."""
    digests = ",".join(f"{part}={fingerprint({part: value})[:_DIGEST]}"
                       for part, value in sorted(view.items()))
    return PREFIX + digests


def parts_of(request_hash: str) -> dict[str, str] | None:
    """The captured parts and digests a captured hash names (None: not a captured hash, or
    :data:`INSPECT_ONLY`)."""
    if not is_captured(request_hash) or request_hash == INSPECT_ONLY:
        return None
    body = request_hash.removeprefix(PREFIX)
    return dict(item.split("=", 1) for item in body.split(",") if "=" in item)


def differing_parts(request_hash: str | None, request: ChatRequest) -> list[str]:
    """The parts of ``request`` that differ from the recorded call's (in order), ``[]``
    when it matches; a whole-request hash differs as ``["request"]``, an inspect-only call
    as ``["content (not captured)"]``."""
    if request_hash is None:
        return ["request"]
    if not is_captured(request_hash):
        return [] if request_hash == request.request_hash else ["request"]
    recorded = parts_of(request_hash)
    if recorded is None:
        return ["content (not captured)"]
    now = parts_of(captured_hash(projection(request, recorded)))
    assert now is not None
    return [part for part in sorted(recorded) if now.get(part) != recorded[part]]


def request_matches(request_hash: str | None, request: ChatRequest) -> bool:
    """Whether ``request`` is the recorded call's request: the same whole request for a
    call forklab recorded; the same captured parts for a call recorded from a trace."""
    if request_hash is None:
        return False
    if not is_captured(request_hash):
        return request_hash == request.request_hash
    return not differing_parts(request_hash, request)


def check_prefix_servable(events: Sequence[AnyEvent], *, node: str, occurrence: int,
                          before: str) -> None:
    """Refuse (``call_not_replayable``) a fork point ``before`` (a call key) of execution
    ``node#occurrence`` when a call the log recorded there earlier was imported from a trace
    without its content: the prefix is answered from the log, and the log cannot answer
    what the trace never showed. ``events`` is the log holding the execution; a log that
    was not imported (no ``trace.imported``) passes."""
    imported = next((e for e in events[:3] if isinstance(e, TraceImported)), None)
    if imported is None:
        return
    unseen = {c["call"]: c for c in imported.calls if c.get("call") and not c["replayable"]}
    for event in events:
        if not isinstance(event, AgentRequested | ToolCalled) or event.node != node \
                or event.occurrence != occurrence or (
                    isinstance(event, ToolCalled) and event.call is None):
            continue
        key = call_key(node, occurrence, event.call or "turn:1")
        if key == before:
            return
        info = unseen.get(key or "")
        if info is not None:
            missing = ", ".join(info.get("missing") or ["its content"])
            hint = info.get("capture_hint") or ""
            raise CallNotReplayable(
                f"call {key} comes before the fork point but was imported inspect-only "
                f"({missing} not captured): the prefix is answered from the log, which never "
                f"saw it — fork at or before {key}, or turn content capture on and send the "
                "trace again" + (f" ({hint})" if hint else ""),
                call=key, missing=info.get("missing") or [])


__all__ = ["INSPECT_ONLY", "check_prefix_servable", "captured_hash", "differing_parts", "is_captured",
           "message_form", "model_form", "param_value", "parts_of", "projection",
           "request_matches"]
