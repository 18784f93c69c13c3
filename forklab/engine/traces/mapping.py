"""One trace's spans → one run's events and a synthetic graph (SPEC §8 "In").

The importer produces the calls the tool loop produces (:mod:`forklab.engine.agent_loop`):
``agent.requested`` / ``agent.responded`` per model turn keyed ``turn:N`` (stored ``None``
for the first turn, as the loop stores it), ``tool.called`` / ``tool.returned`` per tool
call the model asked for keyed ``turn:N/tool:M``; so the fold, pages and diff read an
imported run like any other.

Rules:
- spans are ordered by (start time, span id); duplicates of a span id count once;
- a model or tool span belongs to its nearest ancestor *agent* span (GenAI
  ``invoke_agent``, OpenInference ``AGENT``), else its nearest ancestor *step* (chain or
  any other span): that step is the node (its name sanitized; occurrences count repeats);
  a call with no step above it belongs to the node ``agent``;
- a step becomes a node when it owns calls, or when it is a leaf (no mapped span below
  it) with no call-owning step above it; a step with spans below it and no calls of its
  own is structure (its name labels the run when it is the root); other spans inside a
  node or a call are part of it;
- turns number in start order within a node; a tool call of a turn is matched to an
  execute_tool/TOOL span by call id, else by name in order; its result comes from that
  span, else from the next turn's ``tool`` message answering it; never guessed;
- a node of forklab's own export (its call spans carry ``forklab.seq``) is read by what
  the spans say: call keys, roles, recorded order, human gates and subgraphs
  (:mod:`forklab.engine.traces.turns`); no other trace is read that way;
- a call is *replayable* when its whole request (messages, and tool definitions when tools
  were in play) and its reply were captured, else inspect-only with what is missing;
- cost is the usage priced by the price table (``None`` for an unpriced model).

Deterministic and idempotent: the same spans, in any order and with repeats, give equal
events (the property tests check it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from openinference.semconv.trace import SpanAttributes
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GEN_AI_CONVERSATION_ID,
)

from forklab.engine.canonical import fingerprint
from forklab.engine.events import (
    AnyEvent,
    MemoryWritten,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    RunCompleted,
    RunFailed,
    RunStarted,
    TraceImported,
)
from forklab.engine.graph import GraphSpec
from forklab.engine.providers.pricing import PriceTable
from forklab.engine.traces import genai, openinference
from forklab.engine.traces.graphs import GraphNode, synthetic_graph
from forklab.engine.traces.observed import Call, ModelCall, Observed, Step, ToolExec
from forklab.engine.traces.otlp import Rejected, SpanRecord
from forklab.engine.traces.turns import Plan, plan_calls, read_gate

DEFAULT_NODE = "agent"
SESSION_ID = SpanAttributes.SESSION_ID
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-]+")


@dataclass(frozen=True, slots=True)
class ImportedRun:
    """A mapped trace: the run's events, its synthetic graph and what was not mapped."""

    trace_id: str
    events: list[AnyEvent]
    graph: GraphSpec
    calls: list[dict[str, Any]]  # {call, kind, span_id, replayable, missing, capture_hint}
    rejected: list[Rejected] = field(default_factory=list)
    conversation: str | None = None


@dataclass
class _Node:
    id: str
    span: SpanRecord
    step: Step | None
    calls: list[tuple[SpanRecord, Call]] = field(default_factory=list)
    occurrence: int = 1


def node_id(name: str) -> str:
    """A span or agent name as a node id (the call key grammar's node part)."""
    cleaned = _UNSAFE.sub("_", name).strip("_")[:100] or DEFAULT_NODE
    return cleaned if re.match(r"[A-Za-z_]", cleaned) else f"n_{cleaned}"[:100]


def observe(span: SpanRecord) -> Observed | str:
    """The span read by the dialect that claims it (GenAI first), else a plain step; a
    human gate's or subgraph's span of forklab's own export as that gate."""
    gate = read_gate(span)
    if gate is not None:
        return gate
    for dialect in (genai, openinference):
        if dialect.claims(span):
            found: Observed | str = dialect.read(span)
            return found
    return Step(span_id=span.span_id, name=span.name)


def map_trace(spans: Iterable[SpanRecord], *, run_id: str,
              prices: PriceTable | None = None) -> ImportedRun:
    """The run of one trace. Raises ValueError when ``spans`` is empty or mixes traces."""
    ordered = _ordered(spans)
    if not ordered:
        raise ValueError("a trace needs at least one span")
    if len({s.trace_id for s in ordered}) != 1:
        raise ValueError("spans of more than one trace")
    seen: dict[str, Observed] = {}
    rejected: list[Rejected] = []
    for span in ordered:
        found = observe(span)
        if isinstance(found, str):
            rejected.append(Rejected(span.span_id, span.name, found))
        else:
            seen[span.span_id] = found
    nodes, label = _nodes(ordered, seen)
    builder = _Builder(run_id, prices or PriceTable())
    return builder.build(ordered[0].trace_id, ordered, nodes, label, rejected)


def conversation(ordered: Sequence[SpanRecord]) -> str | None:
    """The conversation a trace belongs to: the first span naming one (GenAI
    ``gen_ai.conversation.id``, OpenInference ``session.id``)."""
    for span in ordered:
        for key in (GEN_AI_CONVERSATION_ID, SESSION_ID):
            found = span.attributes.get(key)
            if isinstance(found, str | int) and str(found):
                return str(found)[:200]
    return None


def _ordered(spans: Iterable[SpanRecord]) -> list[SpanRecord]:
    unique: dict[str, SpanRecord] = {}
    for span in sorted(spans, key=lambda s: (s.start_ns, s.span_id, s.end_ns)):
        unique.setdefault(span.span_id, span)
    return list(unique.values())


def _nodes(ordered: Sequence[SpanRecord], seen: dict[str, Observed]
           ) -> tuple[list[_Node], str]:
    by_id = {s.span_id: s for s in ordered}
    chains: dict[str, list[str]] = {}

    def ancestors(span: SpanRecord) -> list[str]:
        """The span's ancestors present in the trace, nearest first (a parent cycle, which
        only a broken exporter makes, ends the walk)."""
        if span.span_id not in chains:
            chain, parent = [], span.parent_id
            while parent is not None and parent in by_id and parent not in chain \
                    and parent != span.span_id:
                chain.append(parent)
                parent = by_id[parent].parent_id
            chains[span.span_id] = chain
        return chains[span.span_id]

    def nearest_step(span: SpanRecord) -> str | None:
        """The call's owner: its nearest agent span above, else its nearest step (a
        framework's chains nest inside the agent; a call inside a call — a tool that asks
        a model — belongs to the outer call's node)."""
        first = None
        for parent in ancestors(span):
            found = seen.get(parent)
            if isinstance(found, Step):
                if found.agent:
                    return parent
                first = first or parent
        return first

    owners: dict[str | None, list[SpanRecord]] = {}
    for span in ordered:
        if isinstance(seen.get(span.span_id), Call):
            owners.setdefault(nearest_step(span), []).append(span)
    owning = {k for k in owners if k is not None}
    above = {a for s in ordered if s.span_id in seen for a in ancestors(s)}
    nodes: list[_Node] = []
    root_label = ""
    for span in ordered:
        step = seen.get(span.span_id)
        if not isinstance(step, Step):
            continue
        chain = ancestors(span)
        inside = any(a in owning or isinstance(seen.get(a), Call)
                     for a in chain)
        if span.span_id in owning or (not inside and span.span_id not in above):
            nodes.append(_Node(node_id(step.name), span, step))
        elif not chain and not root_label:
            root_label = step.name
    if None in owners:
        first = owners[None][0]
        nodes.append(_Node(DEFAULT_NODE, first, None))
    by_span = {n.span.span_id: n for n in nodes if n.step is not None}
    for owner, calls in owners.items():
        target = by_span[owner] if owner is not None else next(
            n for n in nodes if n.step is None)
        target.calls = [(c, _as_call(seen[c.span_id])) for c in calls]
    nodes.sort(key=lambda n: (n.span.start_ns if n.step else n.calls[0][0].start_ns,
                              n.span.span_id))
    counts: dict[str, int] = {}
    for node in nodes:
        counts[node.id] = node.occurrence = counts.get(node.id, 0) + 1
    return nodes, root_label


def _first_model(node: _Node) -> tuple[str, str] | None:
    for _, call in node.calls:
        if isinstance(call, ModelCall):
            return call.provider, call.model
    return None


def _asks(node: _Node) -> bool:
    """Whether the node made model or tool calls (a node with only a human gate or a
    subgraph is a step)."""
    return any(isinstance(call, ModelCall | ToolExec) for _, call in node.calls)


def _as_call(found: Observed) -> Call:
    assert isinstance(found, Call)
    return found


class _Builder:
    """Appends a run's events one by one, numbering them (seq) and timing them (span
    times)."""

    def __init__(self, run_id: str, prices: PriceTable) -> None:
        self.run_id, self.prices = run_id, prices
        self.events: list[AnyEvent] = []
        self.calls: list[dict[str, Any]] = []

    def emit(self, cls: type[Any], at_ns: int, node: _Node | None = None,
             **payload: Any) -> None:
        envelope: dict[str, Any] = {}
        if node is not None:
            envelope = {"node": node.id, "occurrence": node.occurrence, "iteration": 1}
        self.events.append(cls(run_id=self.run_id, seq=len(self.events) + 1,
                               at=at_ns / 1e9, **envelope, **payload))

    def build(self, trace_id: str, ordered: Sequence[SpanRecord], nodes: list[_Node],
              label: str, rejected: list[Rejected]) -> ImportedRun:
        root = ordered[0]
        graph = synthetic_graph([
            GraphNode(node.id, "agent" if _asks(node) else "step",
                      node.step.name if node.step else node.calls[0][0].name,
                      _first_model(node)) for node in nodes], label or root.name)
        plans = [plan_calls(node.id, node.occurrence, node.calls, self.prices)
                 for node in nodes]
        for plan in plans:
            self.calls.extend(plan.info)
        self.emit(RunStarted, root.start_ns, graph_id=graph.id, graph_version=1,
                  graph_hash=graph.content_hash, input={}, start=nodes[0].id if nodes
                  else DEFAULT_NODE, label=(label or root.name)[:200])
        self.emit(TraceImported, root.start_ns, trace_id=trace_id,
                  spans=len(ordered), calls=self.calls, conversation=conversation(ordered),
                  rejected=[{"span_id": r.span_id, "name": r.name, "reason": r.reason}
                            for r in rejected])
        failed = False
        for i, (node, plan) in enumerate(zip(nodes, plans, strict=True)):
            following = [nodes[i + 1].id] if i + 1 < len(nodes) else []
            failed = self.node(node, plan, following)
        end = max(s.end_ns for s in ordered)
        if failed or root.is_error:
            self.emit(RunFailed, end, error={"code": "span_error",
                                             "message": root.status_message or "error"})
        else:
            self.emit(RunCompleted, end)
        return ImportedRun(trace_id, self.events, graph, self.calls, rejected,
                           conversation(ordered))

    def node(self, node: _Node, plan: Plan, following: list[str]) -> bool:
        span = node.span
        start = span.start_ns if node.step else node.calls[0][0].start_ns
        end = span.end_ns if node.step else max(c.end_ns for c, _ in node.calls)
        self.emit(NodeStarted, start, node, kind="agent" if _asks(node) else "tool",
                  fingerprint=fingerprint({"span": span.span_id}), reads={})
        for step in plan.steps:
            self.emit(step[0], step[1], node, **step[2])
        if plan.answer is not None:
            self.emit(MemoryWritten, end, node, key=node.id, value=plan.answer)
        duration = max(0.0, (end - start) / 1e6)
        if node.step is not None and span.is_error:
            self.emit(NodeFailed, end, node, duration_ms=duration,
                      error={"code": "span_error", "message": span.status_message or "error"})
            return True
        self.emit(NodeCompleted, end, node, next=following, duration_ms=duration)
        return False


__all__ = ["DEFAULT_NODE", "ImportedRun", "map_trace", "node_id", "observe"]
