"""What differs between a recorded call and the call the code makes now (``prefix_diverged``).

A fork answers the calls before its point from the log; a workflow's code must make them
again as they were recorded (SPEC §7). When it does not, saying *which call* is not enough
to act on: :func:`request_difference` names the parts of a model request that differ —
``message 3 (role user) content differs: recorded '…' now '…'``, ``messages: 4 recorded,
5 now``, ``tools differ: added lookup_order``, ``model gpt-4.1 → gpt-4o`` — and
:func:`tool_call_difference` the name or arguments of a tool call.

Pure and only asked on a mismatch: the matching (common) case compares request hashes and
never comes here. Requests are compared in the form ``agent.requested`` records them
(:func:`request_fields`), with the same redaction applied to both sides, so a secret the log
hides is not written into an error by the side that was not redacted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from forklab.engine.actions import ToolCall
from forklab.engine.canonical import canonical_json
from forklab.engine.events import AgentRequested, Event
from forklab.engine.providers import ChatRequest
from forklab.engine.redaction import Redactor
from forklab.engine.state import Execution

EXCERPT = 60
"""Characters of each side shown around the first difference of a text."""
MOST_PARTS = 3
"""Differing parts named in a message (``parts`` in the detail holds them all)."""

# the recorded fields of a request, in the order differences are reported: the call model's
# settings, then what the model reads (a message that changed is usually the news)
_SETTINGS = ("provider", "model", "temperature")
_OFFERED = ("tool_choice", "parallel_tool_calls", "response_format")


@dataclass(frozen=True, slots=True)
class Difference:
    """One differing part: where (``messages[2].content``, ``model``, ``tools``), a
    one-line account, and both sides (excerpts for long text)."""

    part: str
    summary: str
    recorded: Any = None
    now: Any = None

    def to_wire(self) -> dict[str, Any]:
        return {"part": self.part, "summary": self.summary, "recorded": self.recorded,
                "now": self.now}


def request_fields(request: ChatRequest) -> dict[str, Any]:
    """The recorded fields of ``request``, shaped as an ``agent.requested`` payload holds
    them (messages as a list, tools as wire dicts, unset tool fields left out)."""
    fields: dict[str, Any] = {
        "provider": request.provider, "model": request.model,
        "temperature": request.temperature, "system_prompt": request.system_prompt,
        "messages": list(request.messages), "params": dict(request.params)}
    if request.tools:
        fields["tools"] = [t.to_wire() for t in request.tools]
    for name in _OFFERED:
        if getattr(request, name) is not None:
            fields[name] = getattr(request, name)
    return fields


def as_recorded(request: ChatRequest, redactor: Redactor) -> dict[str, Any]:
    """:func:`request_fields` of ``request`` redacted as ``agent.requested`` records it."""
    fields = request_fields(request)
    fields.update(redactor.redact_fields(system_prompt=fields["system_prompt"],
                                         messages=fields["messages"], params=fields["params"]))
    return fields


def recorded_request(logs: Iterable[Sequence[Event]], node: str, occurrence: int,
                     request_hash: str) -> dict[str, Any] | None:
    """The recorded fields of the model request ``request_hash`` made in execution
    ``node#occurrence``, from the first of ``logs`` holding it (the base's log, then its
    ancestors': a fork's prefix executions were recorded there); None when none does (an
    archived log). A scan, for an error only."""
    for events in logs:
        for event in events:
            if (isinstance(event, AgentRequested) and event.request_hash == request_hash
                    and event.node == node and event.occurrence == occurrence):
                fields = event.payload()
                return {k: v for k, v in fields.items() if v is not None or k == "temperature"}
    return None


def recorded_tool_call(execution: Execution | None, key: str) -> ToolCall | None:
    """The recorded ``tool.called`` of call ``key`` in ``execution``, if any."""
    return next((a for a in (execution.actions if execution else ())
                 if isinstance(a, ToolCall) and a.call == key), None)


def request_difference(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[Difference]:
    """Every part in which request ``now`` differs from ``recorded`` (both in the form of
    :func:`request_fields`), settings first, then system prompt, messages, tools, the other
    tool fields and params. Empty when the recorded fields are equal (the request differs in
    something the log does not keep, e.g. ``max_tokens``)."""
    found: list[Difference] = []
    for name in _SETTINGS:
        if recorded.get(name) != now.get(name):
            found.append(Difference(name, f"{name} {recorded.get(name)} → {now.get(name)}",
                                    recorded.get(name), now.get(name)))
    was, is_ = str(recorded.get("system_prompt") or ""), str(now.get("system_prompt") or "")
    if was != is_:
        a, b = excerpts(was, is_)
        found.append(Difference("system_prompt",
                                f"system prompt differs: recorded {a!r} now {b!r}", a, b))
    found.extend(_messages(list(recorded.get("messages") or ()), list(now.get("messages") or ())))
    found.extend(_tools(list(recorded.get("tools") or ()), list(now.get("tools") or ())))
    for name in _OFFERED:
        if canonical_json(recorded.get(name)) != canonical_json(now.get(name)):
            a, b = excerpts(_text(recorded.get(name)), _text(now.get(name)))
            found.append(Difference(name, f"{name} differs: recorded {a} now {b}", a, b))
    found.extend(_params(dict(recorded.get("params") or {}), dict(now.get("params") or {})))
    return found


def tool_call_difference(recorded_name: str | None, recorded_args: Any, name: str,
                         args: Any) -> list[Difference]:
    """How a tool call differs from the recorded one: its tool's name, then its arguments
    (an excerpt of each side's canonical JSON around the first difference)."""
    found: list[Difference] = []
    if recorded_name != name:
        found.append(Difference("tool", f"tool name {recorded_name} vs {name} (recorded vs "
                                        "now)", recorded_name, name))
    if canonical_json(recorded_args) != canonical_json(args):
        a, b = excerpts(canonical_json(recorded_args), canonical_json(args))
        found.append(Difference("arguments", f"arguments differ: {a} vs {b} (recorded vs now)",
                                a, b))
    return found


def described(differences: Sequence[Difference]) -> str:
    """The differences as one clause for an error message (the first few; then how many
    more), or "" for none."""
    shown = "; ".join(d.summary for d in differences[:MOST_PARTS])
    more = len(differences) - MOST_PARTS
    return shown + (f"; and {more} more difference{'s' if more > 1 else ''}" if more > 0
                    else "")


def excerpts(a: str, b: str, width: int = EXCERPT) -> tuple[str, str]:
    """The parts of ``a`` and ``b`` around their first differing character, at most
    ``width`` characters each, with ``…`` where text was cut (texts that short: whole)."""
    if len(a) <= width and len(b) <= width:
        return a, b
    same = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        same += 1
    start = max(0, same - width // 3)

    def cut(text: str) -> str:
        part = text[start:start + width]
        return ("…" if start else "") + part + ("…" if start + width < len(text) else "")

    return cut(a), cut(b)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def _messages(was: list[Any], now: list[Any]) -> list[Difference]:
    """The first message that differs (one: later ones usually follow from it), then the
    count when one side has more."""
    found: list[Difference] = []
    for i, (a, b) in enumerate(zip(was, now, strict=False)):
        if canonical_json(a) == canonical_json(b):
            continue
        role = b.get("role") if isinstance(b, dict) else None
        where = f"message {i + 1} (role {role})"
        if isinstance(a, dict) and isinstance(b, dict):
            keys = [k for k in (*a, *(k for k in b if k not in a))
                    if canonical_json(a.get(k)) != canonical_json(b.get(k))]
            key = keys[0]
            x, y = excerpts(_text(a.get(key, "")), _text(b.get(key, "")))
            found.append(Difference(f"messages[{i}].{key}",
                                    f"{where} {key} differs: recorded {x!r} now {y!r}", x, y))
        else:
            x, y = excerpts(_text(a), _text(b))
            found.append(Difference(f"messages[{i}]",
                                    f"{where} differs: recorded {x!r} now {y!r}", x, y))
        break
    if len(was) != len(now):
        found.append(Difference("messages", f"messages: {len(was)} recorded, {len(now)} now",
                                len(was), len(now)))
    return found


def _tools(was: list[Any], now: list[Any]) -> list[Difference]:
    def named(tools: list[Any]) -> dict[str, Any]:
        return {str(t.get("name")) if isinstance(t, dict) else canonical_json(t): t
                for t in tools}

    a, b = named(was), named(now)
    added = [n for n in b if n not in a]
    removed = [n for n in a if n not in b]
    changed = [n for n in a if n in b and canonical_json(a[n]) != canonical_json(b[n])]
    said = []
    if added:
        said.append(f"added {', '.join(added)}")
    if removed:
        said.append(f"removed {', '.join(removed)}")
    for name in changed:
        parts = [k for k in ("description", "parameters")
                 if canonical_json(a[name].get(k)) != canonical_json(b[name].get(k))]
        said.append(f"{name}'s {' and '.join(parts) or 'definition'} changed")
    if not said and list(a) != list(b):
        said.append(f"reordered: {', '.join(a)} recorded, {', '.join(b)} now")
    if not said:
        return []
    return [Difference("tools", f"tools differ: {'; '.join(said)}", list(a), list(b))]


def _params(was: dict[str, Any], now: dict[str, Any]) -> list[Difference]:
    found = []
    for key in (*was, *(k for k in now if k not in was)):
        if key not in now:
            found.append(Difference(f"params.{key}", f"{key} was sent, now is not",
                                    was[key], None))
        elif key not in was:
            found.append(Difference(f"params.{key}", f"{key} is sent now, was not",
                                    None, now[key]))
        elif canonical_json(was[key]) != canonical_json(now[key]):
            a, b = excerpts(_text(was[key]), _text(now[key]))
            found.append(Difference(f"params.{key}", f"{key} {a} → {b}", a, b))
    return found


__all__ = ["Difference", "as_recorded", "described", "excerpts", "recorded_request",
           "recorded_tool_call", "request_difference", "request_fields", "tool_call_difference"]
