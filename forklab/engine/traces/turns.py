"""The calls of one imported node: model turns and the tool calls they asked for, as the
tool loop records them (``turn:N``, ``turn:N/tool:M``), each with its import info.

A tool call's arguments are those the model wrote (``{"$raw": text}`` when not an object,
as the loop records them); its result comes from the execute_tool/TOOL span matched to it
(by call id, else by name in order) when that captured one, else from the ``tool`` message
answering it in a later turn's request; a result captured nowhere is not invented: the
call has ``tool.called`` without ``tool.returned`` and is inspect-only.

A trace forklab exported itself (:mod:`forklab.engine.traces.export`: every call span of
the node carries ``forklab.seq``) is read by what its spans say instead: each span is the
call its ``forklab.call.key`` names (with its role and index; a span without a key is the
node's own tool call, as a tool node records it), and the node's call events come back in
the order of their recorded seqs — so a panel's role instances, a tool node's tool and
parallel tool calls import back as they were recorded. Nothing is guessed for other traces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forklab.engine.calls import parse_call_key, tool_call, turn_call
from forklab.engine.canonical import fingerprint
from forklab.engine.events import (
    AgentRequested,
    AgentResponded,
    CallFailed,
    ToolCalled,
    ToolReturned,
)
from forklab.engine.providers.base import ChatRequest
from forklab.engine.providers.pricing import PriceTable
from forklab.engine.traces.export import (
    CALL_INDEX,
    CALL_KEY,
    CALL_ROLE,
    END_SEQ,
    EVENT,
    EVENT_END,
    OWN_EVENTS,
    SEQ,
    TOOL_EFFECT,
)
from forklab.engine.traces.observed import Call, Gate, ModelCall, ToolExec, loads_maybe
from forklab.engine.traces.otlp import SpanRecord
from forklab.engine.traces.replayable import HINTS

API_DEFAULT_TEMPERATURE = 1.0
"""What the vendors' APIs use when a request sets no temperature (recorded as a default
in the call's import info, so nothing reads it as captured)."""

Step = tuple[type[Any], int, dict[str, Any]]


@dataclass
class Plan:
    """One node's call events (class, time in ns, payload) in log order, the import info of
    each call, and the node's answer (its last captured reply text)."""

    steps: list[Step] = field(default_factory=list)
    info: list[dict[str, Any]] = field(default_factory=list)
    answer: str | None = None


@dataclass
class _Turn:
    key: str
    span: SpanRecord
    call: ModelCall
    matched: list[tuple[SpanRecord, ToolExec] | None]
    role: str | None = None
    index: int | None = None


def plan_calls(node: str, occurrence: int, calls: list[tuple[SpanRecord, Call]],
               prices: PriceTable) -> Plan:
    """The plan of one node's calls, in span order (see the module docstring)."""
    if calls and all(isinstance(span.attributes.get(SEQ), int) for span, _ in calls):
        return _recorded(node, occurrence, calls, prices)
    turns: list[_Turn] = []
    orphans: list[tuple[int, SpanRecord, ToolExec]] = []
    for span, found in calls:
        if isinstance(found, Gate):  # only forklab's export has them (read above)
            continue
        if isinstance(found, ModelCall):
            turns.append(_Turn(turn_call(len(turns) + 1), span, found,
                               [None] * len(found.reply_tool_calls)))
        elif not _match(turns, span, found):
            orphans.append((len(turns), span, found))
    plan = Plan()
    prefix = f"{node}#{occurrence}/"
    for index, span, found in orphans:  # before any turn
        if index == 0:
            _orphan(plan, prefix, span, found)
    for n, turn in enumerate(turns):
        _model_turn(plan, prefix, turn, prices)
        later = turns[n + 1].call.messages if n + 1 < len(turns) else None
        for m, asked in enumerate(turn.call.reply_tool_calls, start=1):
            _tool_turn(plan, prefix, tool_call(turn.key, m), turn, asked,
                       turn.matched[m - 1], later)
        for index, span, found in orphans:
            if index == n + 1:
                _orphan(plan, prefix, span, found)
    return plan


def read_gate(span: SpanRecord) -> Gate | str | None:
    """A human gate's or subgraph's span of forklab's own export as that gate (a reason
    when its events are not ones such a span holds); None for any other span."""
    if EVENT not in span.attributes:
        return None
    start = _own_event(span.attributes[EVENT])
    end = _own_event(span.attributes[EVENT_END]) if EVENT_END in span.attributes else None
    for found in (start, end):
        if isinstance(found, str):
            return found
    assert not isinstance(start, str) and not isinstance(end, str) and start is not None
    return Gate(span_id=span.span_id, start=start, end=end)


def _own_event(raw: Any) -> tuple[str, dict[str, Any]] | str:
    """An :data:`EVENT` attribute's (type, payload), or why it is not one."""
    found = loads_maybe(raw)
    cls = OWN_EVENTS.get(str(found.get("type"))) if isinstance(found, dict) else None
    payload = found.get("payload") if isinstance(found, dict) else None
    if cls is None or not isinstance(payload, dict):
        return "a forklab.event that is not a human gate's or subgraph's event"
    try:
        cls(run_id="", seq=0, **payload)
    except TypeError as exc:
        return f"a forklab.event whose payload its event does not take: {exc}"
    return cls.TYPE, payload


def _recorded(node: str, occurrence: int, calls: list[tuple[SpanRecord, Call]],
              prices: PriceTable) -> Plan:
    """The plan of a node forklab exported: each span the call its key names, the call
    events ordered by the seqs the spans carry (an unclosed span's end right after its
    start), the answer the last reply without tool calls in that order."""
    prefix = f"{node}#{occurrence}/"
    steps: list[tuple[float, Step]] = []
    info: list[tuple[float, dict[str, Any]]] = []
    answers: list[tuple[float, str]] = []
    for span, found in calls:
        one = Plan()
        attrs = span.attributes
        address = parse_call_key(str(attrs.get(CALL_KEY, "")))
        key = address.call if address is not None and address.call else None
        if isinstance(found, Gate):
            one.steps.append((OWN_EVENTS[found.start[0]], span.start_ns, found.start[1]))
            if found.end is not None:
                one.steps.append((OWN_EVENTS[found.end[0]], span.end_ns, found.end[1]))
        elif isinstance(found, ModelCall):
            role = attrs.get(CALL_ROLE)
            index = attrs.get(CALL_INDEX)
            role = None if role is None else str(role)
            index = index if isinstance(index, int) else None
            _model_turn(one, prefix, _Turn(key or turn_call(1, role, index), span, found, [],
                                           role, index), prices)
        else:
            _orphan(one, prefix, span, found, key=key,
                    effect=str(attrs.get(TOOL_EFFECT) or "read"), failed=span.is_error)
        first = float(attrs[SEQ])
        end = attrs.get(END_SEQ)
        last = float(end) if isinstance(end, int) else first + 0.5
        steps.extend(zip((first, last), one.steps, strict=False))
        info.extend((first, entry) for entry in one.info)
        if one.answer is not None:
            answers.append((last, one.answer))
    return Plan(steps=[step for _, step in sorted(steps, key=lambda s: s[0])],
                info=[entry for _, entry in sorted(info, key=lambda s: s[0])],
                answer=max(answers, key=lambda a: a[0])[1] if answers else None)


def _match(turns: list[_Turn], span: SpanRecord, found: ToolExec) -> bool:
    for turn in reversed(turns):
        for i, asked in enumerate(turn.call.reply_tool_calls):
            if turn.matched[i] is not None:
                continue
            if (found.call_id and asked.get("id") == found.call_id) or (
                    not found.call_id and asked.get("name") == found.name):
                turn.matched[i] = (span, found)
                return True
    return False


def _request(call: ModelCall) -> ChatRequest:
    return ChatRequest(provider=call.provider, model=call.model,
                       system_prompt=call.system_prompt or "",
                       temperature=API_DEFAULT_TEMPERATURE if call.temperature is None
                       else call.temperature,
                       messages=tuple(call.messages or ()), params=dict(call.params),
                       tools=tuple(call.tools or ()), tool_choice=call.tool_choice,
                       parallel_tool_calls=call.parallel_tool_calls,
                       response_format=call.response_format)


def _missing(call: ModelCall) -> list[str]:
    missing = []
    if call.messages is None:
        missing.append("request messages")
    if call.reply_text is None:
        missing.append("reply")
    uses_tools = bool(call.reply_tool_calls) or any(
        m.get("role") == "tool" or m.get("tool_calls") for m in call.messages or ())
    if uses_tools and not call.tools:
        missing.append("tool definitions")
    return missing


def _model_turn(plan: Plan, prefix: str, turn: _Turn, prices: PriceTable) -> None:
    call, span = turn.call, turn.span
    request = _request(call)
    role, index = turn.role, turn.index
    stored = None if turn.key == turn_call(1, role, index) else turn.key
    offered: dict[str, Any] = {}
    if request.tools:
        offered["tools"] = [t.to_wire() for t in request.tools]
    for name in ("tool_choice", "parallel_tool_calls", "response_format"):
        if getattr(request, name) is not None:  # as asking.ask records them
            offered[name] = getattr(request, name)
    plan.steps.append((AgentRequested, span.start_ns, dict(
        role=role, index=index, provider=call.provider, model=call.model,
        system_prompt=request.system_prompt, temperature=request.temperature,
        messages=list(request.messages), params=dict(request.params),
        request_hash=request.request_hash, call=stored, **offered)))
    missing = _missing(call)
    info: dict[str, Any] = {"call": prefix + turn.key, "kind": "agent",
                            "span_id": span.span_id, "dialect": call.dialect,
                            "replayable": not missing, "missing": missing}
    if missing:
        info["capture_hint"] = call.capture_hint
    if call.temperature is None:
        info["defaults"] = ["temperature"]
    plan.info.append(info)
    if span.is_error:
        plan.steps.append((CallFailed, span.end_ns, {
            "kind": "agent", "role": role, "index": index, "model": call.model, "label": "live",
            "error": {"type": "span_error", "message": span.status_message or "error"},
            "request_hash": request.request_hash, "call": stored}))
        return
    extra: dict[str, Any] = {}
    if call.reply_tool_calls:
        extra["tool_calls"] = [dict(c) for c in call.reply_tool_calls]
    if call.finish_reason is not None:
        extra["finish_reason"] = call.finish_reason
    plan.steps.append((AgentResponded, span.end_ns, dict(
        role=role, index=index, model=call.model, text=call.reply_text or "",
        input_tokens=call.input_tokens, output_tokens=call.output_tokens,
        cost_usd=prices.cost(call.model, call.input_tokens, call.output_tokens),
        latency_ms=max(0.0, (span.end_ns - span.start_ns) / 1e6), label="live",
        request_hash=request.request_hash, call=stored, **extra)))
    if call.reply_text is not None and not call.reply_tool_calls:
        plan.answer = call.reply_text


def _answer_in(messages: list[dict[str, Any]] | None, call_id: str) -> tuple[bool, Any]:
    for message in messages or ():
        if message.get("role") == "tool" and call_id and message.get("tool_call_id") == call_id:
            return True, message.get("content")
    return False, None


def _tool_turn(plan: Plan, prefix: str, key: str, turn: _Turn, asked: dict[str, Any],
               matched: tuple[SpanRecord, ToolExec] | None,
               later: list[dict[str, Any]] | None) -> None:
    arguments = asked.get("arguments")
    args = arguments if isinstance(arguments, dict) else {"$raw": arguments}
    start = matched[0].start_ns if matched else turn.span.end_ns
    plan.steps.append((ToolCalled, start, {
        "tool": str(asked.get("name", "")), "effect": "read", "args": args, "args_hash": fingerprint(args),
        "call": key, "call_id": str(asked.get("id", "")) or None}))
    if matched is not None and matched[1].captured_result:
        has, result, source = True, matched[1].result, "tool span"
    else:
        has, result = _answer_in(later, str(asked.get("id", "")))
        source = "next request"
    info: dict[str, Any] = {"call": prefix + key, "kind": "tool",
                            "span_id": matched[0].span_id if matched else None,
                            "replayable": has, "missing": [] if has else ["tool result"]}
    if not has:  # the result was in neither the tool span nor the next request
        info["capture_hint"] = turn.call.capture_hint
    if has:
        info["result_from"] = source
        end = matched[0].end_ns if matched else start
        plan.steps.append((ToolReturned, end, {
            "result": result, "label": "live", "call": key,
            "latency_ms": max(0.0, (matched[0].end_ns - matched[0].start_ns) / 1e6)
            if matched else 0.0}))
    plan.info.append(info)


def _orphan(plan: Plan, prefix: str, span: SpanRecord, found: ToolExec, *,
            key: str | None = None, effect: str = "read", failed: bool = False) -> None:
    """A tool span no model turn asked for: a tool call of the node (no call key) — or, in
    a trace forklab exported, the call ``key`` names (a failed one ends in
    ``call.failed``)."""
    arguments = found.arguments
    args = arguments if isinstance(arguments, dict) else {"$raw": arguments}
    plan.steps.append((ToolCalled, span.start_ns, {
        "tool": found.name, "effect": effect, "args": args, "args_hash": fingerprint(args),
        "call": key, "call_id": found.call_id}))
    missing = [what for what, ok in (("tool arguments", found.captured_arguments),
                                     ("tool result", found.captured_result or failed))
               if not ok]
    info: dict[str, Any] = {"call": None if key is None else prefix + key,
                            "node": prefix.rstrip("/"), "kind": "tool",
                            "span_id": span.span_id, "tool": found.name,
                            "replayable": not missing, "missing": missing}
    if missing:
        info["capture_hint"] = HINTS.get(found.dialect, "")
    plan.info.append(info)
    latency = max(0.0, (span.end_ns - span.start_ns) / 1e6)
    if failed:
        plan.steps.append((CallFailed, span.end_ns, {
            "kind": "tool", "role": None, "index": None, "model": None, "label": "live",
            "error": {"type": "span_error", "message": span.status_message or "error"},
            "request_hash": fingerprint(args), "call": key}))
    elif found.captured_result:
        plan.steps.append((ToolReturned, span.end_ns, {
            "result": found.result, "label": "live", "call": key, "latency_ms": latency}))


__all__ = ["API_DEFAULT_TEMPERATURE", "Plan", "plan_calls", "read_gate"]
