"""One node execution as the step drawer shows it: every call with what was sent and what came
back, in full (long values fold and copy, nothing is cut), its label and why it has it,
tokens, cost, latency, the memory it wrote with taint, and how it ended.

Built from the step's events only (``forklab.runs.steps``): requests from
``agent.requested`` / ``tool.called`` / ``human.requested``, answers from
``agent.responded`` / ``tool.returned`` / ``human.answered`` — as recorded, after redaction.
Pure: no database access here.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.calls import call_key, turn_call
from forklab.engine.reused_form import expand_all
from forklab.engine.status import ExecutionStatus
from forklab.engine.traces.replayable import ImportedCalls, badge

LONG_CHARS = 600
LONG_LINES = 12
_ids = itertools.count(1)


@dataclass
class Value:
    """One labelled value of a request or answer."""

    name: str
    text: str
    json: bool = False
    uid: str = field(default_factory=lambda: f"v{next(_ids)}")

    @property
    def long(self) -> bool:
        return len(self.text) > LONG_CHARS or self.text.count("\n") > LONG_LINES

    @property
    def preview(self) -> str:
        first = self.text.strip().splitlines()[0] if self.text.strip() else ""
        return first[:160] + ("…" if len(first) > 160 or self.long else "")


@dataclass
class Exchange:
    """One call the node made: agent, tool, human, route or subgraph."""

    kind: str
    title: str
    label: str = ""
    reason: str = ""
    sent: list[Value] = field(default_factory=list)
    answer: list[Value] = field(default_factory=list)
    model: str = ""
    role: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    latency_ms: float | None = None
    seq: int = 0
    text: str = ""  # the reply text (agents), compared word by word in the diff
    call: str = ""  # the call key (``assist#1/turn:2``); empty for a call without one
    # an imported run's call: {replayable, missing?, capture_hint?} (None: not imported)
    imported: dict[str, Any] | None = None

    @property
    def badge(self) -> str:
        """``replayable`` / ``inspect-only — missing: …; turn on: …`` (imported runs)."""
        return "" if self.imported is None else badge(self.imported)


@dataclass
class Write:
    key: str
    value: Value
    tainted: bool
    deleted: bool


@dataclass
class Step:
    run_id: str
    node: str
    occurrence: int
    iteration: int
    kind: str
    first: int
    last: int
    status: ExecutionStatus = "running"
    duration_ms: float | None = None
    reads: list[Value] = field(default_factory=list)
    fingerprint: str = ""
    exchanges: list[Exchange] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    error: dict[str, Any] | None = None
    blocked: dict[str, Any] | None = None
    memo: bool = False
    inherited_from: str | None = None

    @property
    def before_point(self) -> int:
        return self.first - 1

    @property
    def label(self) -> str:
        for strongest in ("blocked", "changed", "live", "simulated", "reused"):
            if any(e.label == strongest for e in self.exchanges):
                return strongest
        return "memo" if self.memo else ""

    @property
    def tainted(self) -> list[str]:
        return [w.key for w in self.writes if w.tainted]

    @property
    def input_tokens(self) -> int:
        return sum(e.input_tokens for e in self.exchanges)

    @property
    def output_tokens(self) -> int:
        return sum(e.output_tokens for e in self.exchanges)

    @property
    def cost_usd(self) -> float | None:
        costs = [e.cost_usd for e in self.exchanges if e.kind == "agent"]
        return None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)


def text_of(value: Any) -> tuple[str, bool]:
    """A value as shown: strings as they are, anything else as indented JSON."""
    if isinstance(value, str):
        return value, False
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True), True


def value(name: str, raw: Any) -> Value:
    text, is_json = text_of(raw)
    return Value(name=name, text=text, json=is_json)


@dataclass(frozen=True)
class Context:
    """What a label's reason depends on beyond the step's own events."""

    is_fork: bool = False
    targeted: frozenset[str] = frozenset()  # nodes a change of this fork names


def reason(label: str, node: str, context: Context) -> str:
    if label == "live":
        if not context.is_fork:
            return "recorded live: a primary run makes every call for real"
        if node in context.targeted:
            return "made for real: a change of this fork targets this node"
        return "made for real: the base run has no recording of this call to compare with"
    return {
        "reused": "served from the base run's recording: the request matched, nothing was "
                  "paid again",
        "changed": "made for real because the request differs from the recording (an input "
                   "or the configuration changed)",
        "simulated": "supplied by a change of this fork: nothing ran",
        "memo": "served by memoization: a base execution had the same fingerprint",
    }.get(label, label)


def build(events: list[dict[str, Any]], *, run_id: str, context: Context,
          inherited_from: str | None = None) -> Step:
    """The step made of ``events`` (the first one is its ``node.started``; a ``node.reused``
    is read as the events it stands for)."""
    events = expand_all(events)
    start = events[0]
    step = Step(run_id=run_id, node=start["node"] or "", occurrence=start["occurrence"] or 1,
                iteration=start["iteration"] or 1, kind=start["payload"].get("kind", ""),
                first=start["seq"], last=events[-1]["seq"], inherited_from=inherited_from,
                fingerprint=start["payload"].get("fingerprint", ""),
                reads=[value(k, v) for k, v in sorted(start["payload"].get("reads",
                                                                          {}).items())])
    pending: list[Exchange] = []
    for event in events[1:]:
        _apply(step, event, pending, context)
    step.exchanges.extend(pending)
    return step


def _apply(step: Step, event: dict[str, Any], pending: list[Exchange],
           context: Context) -> None:
    kind, p = event["type"], event["payload"]
    handler = _HANDLERS.get(kind)
    if handler is not None:
        handler(step, event, p, pending, context)
    elif kind == "memory.written":
        step.writes.append(Write(key=p.get("key", ""), value=value(p.get("key", ""),
                                                                   p.get("value")),
                                 tainted=bool(p.get("tainted")), deleted=bool(p.get("deleted"))))
    elif kind == "node.completed":
        step.status, step.duration_ms, step.memo = "completed", p.get("duration_ms"), \
            bool(p.get("memo"))
        if step.memo:
            for exchange in step.exchanges + pending:
                exchange.reason = reason("memo", step.node, context)
    elif kind == "node.failed":
        step.status, step.duration_ms, step.error = "failed", p.get("duration_ms"), p.get("error")
    elif kind == "node.interrupted":
        step.status, step.error = "interrupted", {"message": p.get("reason", "")}
    elif kind == "effect.suppressed":
        step.blocked = {"reason": p.get("reason", ""), "inputs": value("inputs", p.get("inputs"))}
        step.status = "blocked"
        for exchange in pending:
            exchange.label, exchange.reason = "blocked", p.get("reason", "")


def _agent_requested(step: Step, event: dict[str, Any], p: dict[str, Any],
                     pending: list[Exchange], context: Context) -> None:
    role = p.get("role") or ""
    if role and p.get("index") is not None:
        role = f"{role}[{p['index']}]"
    sent = [value("system prompt", p.get("system_prompt", "")),
            *[value(f"message {i} ({m.get('role', '?')})", m.get("content", ""))
              for i, m in enumerate(p.get("messages") or [], start=1)],
            value("model", f"{p.get('provider', '')}/{p.get('model', '')}"),
            value("temperature", p.get("temperature"))]
    if p.get("params"):
        sent.append(value("params", p["params"]))
    if role:
        sent.append(value("role", role))
    pending.append(Exchange(kind="agent", title=f"{role or step.node} → {p.get('model', '')}",
                            sent=sent, model=p.get("model", ""), role=role, seq=event["seq"],
                            call=_key(step, p, agent=True)))


def _agent_responded(step: Step, event: dict[str, Any], p: dict[str, Any],
                     pending: list[Exchange], context: Context) -> None:
    exchange = _take(pending, "agent") or Exchange(
        kind="agent", title=f"{step.node} → {p.get('model', '')}", model=p.get("model", ""),
        seq=event["seq"], call=_key(step, p, agent=True))
    label = p.get("label", "")
    exchange.label, exchange.reason = label, reason(label, step.node, context)
    exchange.text = p.get("text", "")
    exchange.answer = [value("reply", exchange.text), value("request hash",
                                                            p.get("request_hash", ""))]
    exchange.input_tokens = int(p.get("input_tokens") or 0)
    exchange.output_tokens = int(p.get("output_tokens") or 0)
    exchange.cost_usd, exchange.latency_ms = p.get("cost_usd"), p.get("latency_ms")
    step.exchanges.append(exchange)


def _tool_called(step: Step, event: dict[str, Any], p: dict[str, Any],
                 pending: list[Exchange], context: Context) -> None:
    effect = f" ({p['effect']})" if p.get("effect") else ""  # a served call does not say
    pending.append(Exchange(kind="tool", title=f"tool {p.get('tool', '')}{effect}",
                            sent=[value("arguments", p.get("args", {}))], seq=event["seq"],
                            call=_key(step, p, agent=False)))


def _tool_returned(step: Step, event: dict[str, Any], p: dict[str, Any],
                   pending: list[Exchange], context: Context) -> None:
    exchange = _take(pending, "tool") or Exchange(
        kind="tool", title="tool result", seq=event["seq"])
    label = p.get("label", "")
    exchange.label, exchange.reason = label, reason(label, step.node, context)
    exchange.answer = [value("result", p.get("result"))]
    exchange.latency_ms = p.get("latency_ms")
    step.exchanges.append(exchange)


def _take(pending: list[Exchange], kind: str) -> Exchange | None:
    """The oldest pending request of ``kind``: an answer closes it even when an earlier
    request of another kind never got one (an imported tool call whose result was not
    captured stays open while the next turn is asked and answered)."""
    for i, exchange in enumerate(pending):
        if exchange.kind == kind:
            return pending.pop(i)
    return None


def _key(step: Step, p: dict[str, Any], *, agent: bool) -> str:
    """The event's full call key (a first turn's ``call`` is stored as None, as the loop
    stores it); empty for a tool call without one."""
    call = p.get("call")
    if call is None and agent:
        call = turn_call(1, p.get("role"), p.get("index"))
    return (call_key(step.node, step.occurrence, call) or "") if call else ""


def mark_imported(step: Step, imported: ImportedCalls) -> None:
    """Each model and tool call of an imported run's step says whether it is replayable
    (a tool call without a key is matched by its order in the execution)."""
    execution, unkeyed = f"{step.node}#{step.occurrence}", 0
    for exchange in step.exchanges:
        if exchange.kind not in ("agent", "tool"):
            continue
        if exchange.call:
            exchange.imported = imported.of(exchange.call)
        elif exchange.kind == "tool":
            exchange.imported = imported.of(None, execution=execution, index=unkeyed)
            unkeyed += 1


def _human_requested(step: Step, event: dict[str, Any], p: dict[str, Any],
                     pending: list[Exchange], context: Context) -> None:
    pending.append(Exchange(kind="human", title="approval gate", seq=event["seq"],
                            sent=[value("question", p.get("prompt", "")),
                                  value("shown to the approver", p.get("context", {}))]))


def _human_answered(step: Step, event: dict[str, Any], p: dict[str, Any],
                    pending: list[Exchange], context: Context) -> None:
    exchange = pending.pop(0) if pending and pending[0].kind == "human" else Exchange(
        kind="human", title="approval gate", seq=event["seq"])
    label = p.get("label", "")
    exchange.label, exchange.reason = label, reason(label, step.node, context)
    exchange.answer = [value("decision", p.get("decision", ""))]
    if p.get("data") is not None:
        exchange.answer.append(value("data", p["data"]))
    if p.get("memory_updates"):
        exchange.answer.append(value("memory updates", p["memory_updates"]))
    if p.get("answered_by"):
        exchange.answer.append(value("answered by", p["answered_by"]))
    step.exchanges.append(exchange)


def _route_decided(step: Step, event: dict[str, Any], p: dict[str, Any],
                   pending: list[Exchange], context: Context) -> None:
    label = p.get("label", "")
    step.exchanges.append(Exchange(
        kind="route", title=f"route → {p.get('to', '')}", label=label, seq=event["seq"],
        reason=p.get("reason", "") if label != "simulated" else reason(label, step.node,
                                                                        context),
        answer=[value("next node", p.get("to", "")), value("why", p.get("reason", ""))]))


def _subgraph(step: Step, event: dict[str, Any], p: dict[str, Any],
              pending: list[Exchange], context: Context) -> None:
    if event["type"] == "subgraph.started":
        pending.append(Exchange(kind="subgraph", title=f"child run of {p.get('graph_id', '')}",
                                seq=event["seq"],
                                sent=[value("child run", p.get("child_run_id", ""))]))
        return
    exchange = pending.pop(0) if pending and pending[0].kind == "subgraph" else Exchange(
        kind="subgraph", title="child run", seq=event["seq"])
    label = p.get("label", "")
    exchange.label, exchange.reason = label, reason(label, step.node, context)
    exchange.answer = [value("status", p.get("status", "")), value("output", p.get("output"))]
    exchange.input_tokens = int(p.get("input_tokens") or 0)
    exchange.output_tokens = int(p.get("output_tokens") or 0)
    exchange.cost_usd = p.get("cost_usd")
    step.exchanges.append(exchange)


_HANDLERS = {
    "agent.requested": _agent_requested, "agent.responded": _agent_responded,
    "tool.called": _tool_called, "tool.returned": _tool_returned,
    "human.requested": _human_requested, "human.answered": _human_answered,
    "route.decided": _route_decided, "subgraph.started": _subgraph,
    "subgraph.completed": _subgraph,
}
