"""The calls of one imported node: model turns and the tool calls they asked for, as the
tool loop records them (``turn:N``, ``turn:N/tool:M``), each with its import info.

A tool call's arguments are those the model wrote (``{"$raw": text}`` when not an object,
as the loop records them); its result comes from the execute_tool/TOOL span matched to it
(by call id, else by name in order) when that captured one, else from the ``tool`` message
answering it in a later turn's request; a result captured nowhere is not invented: the
call has ``tool.called`` without ``tool.returned`` and is inspect-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forklab.engine.calls import tool_call, turn_call
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
from forklab.engine.traces.observed import ModelCall, ToolExec
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


def plan_calls(node: str, occurrence: int,
               calls: list[tuple[SpanRecord, ModelCall | ToolExec]],
               prices: PriceTable) -> Plan:
    """The plan of one node's calls, in span order (see the module docstring)."""
    turns: list[_Turn] = []
    orphans: list[tuple[int, SpanRecord, ToolExec]] = []
    for span, found in calls:
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
    stored = None if turn.key == turn_call(1) else turn.key
    offered: dict[str, Any] = {}
    if request.tools:
        offered["tools"] = [t.to_wire() for t in request.tools]
    for name in ("tool_choice", "parallel_tool_calls", "response_format"):
        if getattr(request, name) is not None:  # as asking.ask records them
            offered[name] = getattr(request, name)
    plan.steps.append((AgentRequested, span.start_ns, dict(
        role=None, index=None, provider=call.provider, model=call.model,
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
            "kind": "agent", "role": None, "index": None, "model": call.model, "label": "live",
            "error": {"type": "span_error", "message": span.status_message or "error"},
            "request_hash": request.request_hash, "call": stored}))
        return
    extra: dict[str, Any] = {}
    if call.reply_tool_calls:
        extra["tool_calls"] = [dict(c) for c in call.reply_tool_calls]
    if call.finish_reason is not None:
        extra["finish_reason"] = call.finish_reason
    plan.steps.append((AgentResponded, span.end_ns, dict(
        role=None, index=None, model=call.model, text=call.reply_text or "",
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


def _orphan(plan: Plan, prefix: str, span: SpanRecord, found: ToolExec) -> None:
    """A tool span no model turn asked for: a tool call of the node (no call key)."""
    arguments = found.arguments
    args = arguments if isinstance(arguments, dict) else {"$raw": arguments}
    plan.steps.append((ToolCalled, span.start_ns, {
        "tool": found.name, "effect": "read", "args": args, "args_hash": fingerprint(args), "call": None,
        "call_id": found.call_id}))
    missing = [what for what, ok in (("tool arguments", found.captured_arguments),
                                     ("tool result", found.captured_result)) if not ok]
    info: dict[str, Any] = {"call": None, "node": prefix.rstrip("/"), "kind": "tool",
                            "span_id": span.span_id, "tool": found.name,
                            "replayable": not missing, "missing": missing}
    if missing:
        info["capture_hint"] = HINTS.get(found.dialect, "")
    plan.info.append(info)
    if found.captured_result:
        plan.steps.append((ToolReturned, span.end_ns, {
            "result": found.result, "label": "live", "call": None,
            "latency_ms": max(0.0, (span.end_ns - span.start_ns) / 1e6)}))


__all__ = ["API_DEFAULT_TEMPERATURE", "Plan", "plan_calls"]
