"""Strict replay: re-drive a recorded run through today's graph and engine (SPEC §3.8).

Every call is served from the recording (matched by node, occurrence, role and instance);
routers, reducers and the planner run for real. Each event the re-drive appends is compared
with the recorded event at the same seq — type, envelope and payload, timing fields aside —
and the first difference raises ``replay_divergence`` (code or graph drift). With
``strict=False`` the re-drive tolerates changed requests and reports no divergence: that is
how saved cases run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from forklab.engine.actions import (
    AgentAnswer,
    CallFailure,
    ChildOutcome,
    HumanDecision,
    RouteTaken,
    ToolCall,
    ToolResult,
    call_records,
)
from forklab.engine.calls import turn_call
from forklab.engine.canonical import canonical_json
from forklab.engine.environment import Environment
from forklab.engine.errors import ForklabError, ReplayDivergence
from forklab.engine.events import (
    AnyEvent,
    Event,
    HumanAnswered,
    NodeCompleted,
    NodeReused,
    NodeStarted,
    ReflectionDiscarded,
    RunForked,
)
from forklab.engine.fork.changes import parse_changes
from forklab.engine.fork.lineage import forked_event
from forklab.engine.fork.memo import Recording
from forklab.engine.fork.percall import CallChanges
from forklab.engine.graph import ApprovalNode, GraphSpec, RouterNode, SubgraphNode, ToolNode
from forklab.engine.oracle import (
    Blocked,
    ChildResult,
    HumanAnswer,
    NodeCall,
    NodeFailure,
    RecordedTool,
    Served,
    ToolUse,
)
from forklab.engine.providers import ChatRequest
from forklab.engine.reducers import evolve, fold
from forklab.engine.runner import Runner
from forklab.engine.state import Execution, RunState
from forklab.engine.status import CallLabel
from forklab.engine.store import GraphStore, MemoryStore, Store
from forklab.engine.tools import ToolContext

VOLATILE = frozenset({"at", "duration_ms", "latency_ms", "graph_hash", "graph_version"})


class RecordedOracle:
    """Answers every action from a recorded state's executions; never calls anything."""

    captures_reflections = True
    overlaps_calls = False  # every answer is a lookup: nothing to overlap

    def __init__(self, recorded: RunState, *, strict: bool,
                 events: Sequence[AnyEvent] = ()) -> None:
        self.strict = strict
        self.by_occurrence = {(e.node, e.occurrence): e for e in recorded.all_executions()}
        # a fork's per-call setting changes shaped the requests it recorded
        self.calls = CallChanges.of(parse_changes(recorded.changes), Recording.of(recorded))
        # who answered a gate is in the log, not in the folded action record
        self.answered_by = {(e.node, e.occurrence): e.answered_by for e in events
                            if isinstance(e, HumanAnswered)}
        # a fork's guard refusals, re-raised where the recording was blocked
        self.blocked = {e["node"]: e for e in recorded.suppressed_effects}
        # a fork tail's tool that ran live had its reflection writes captured and discarded
        # (events between its tool.called and its result): a served tool states them again
        self.reflections: dict[tuple[str | None, int | None], list[dict[str, Any]]] = {}
        for e in events:
            if type(e) is ReflectionDiscarded:
                self.reflections.setdefault((e.node, e.occurrence), []).append(
                    {"store": e.store, "key": e.key, "value": e.value})

    def _exec(self, call: NodeCall) -> Execution:
        ex = self.by_occurrence.get((call.node, call.occurrence))
        if ex is None:
            raise NodeFailure("missing_context", f"no recording of {call.node!r} execution "
                              f"{call.occurrence}: the replay took a path the run never took")
        return ex

    def output(self, call: NodeCall) -> dict[str, Any] | None:
        """A node whose output a change substituted is substituted again, with what it wrote.

        Such an execution opens with its simulated result: no request, call or child run
        came before it (a ``tool`` change, by contrast, follows the tool's call)."""
        ex = self.by_occurrence.get((call.node, call.occurrence))
        first = ex.actions[0] if ex is not None and ex.actions else None
        if (isinstance(first, (AgentAnswer, ToolResult, ChildOutcome))
                and first.label == "simulated"):
            return dict(ex.writes)  # type: ignore[union-attr]
        return None

    def memo(self, call: NodeCall) -> Execution | None:
        """Strict: a fork's memo hit is re-served as one, so its events come out the same
        (its fingerprint, computed now, still shows drift). Not strict (a case): the node
        executes under today's graph with its calls served from the recording — re-served
        whole, its recorded writes would outlive an edit of the node's ``writes``."""
        ex = self.by_occurrence.get((call.node, call.occurrence))
        return ex if self.strict and ex is not None and ex.memo else None

    def _check_blocked(self, call: NodeCall) -> None:
        effect = self.blocked.get(call.node)
        if effect is not None and self._exec(call).status == "blocked":
            raise Blocked(effect["reason"], effect["inputs"])

    def adjust(self, call: NodeCall, key: str, request: ChatRequest) -> ChatRequest:
        """The recorded request of that call is what it sends: a fork's per-call setting
        changes are re-applied (``changes``, the fork's)."""
        return self.calls.adjust(call.node, call.occurrence, key, request)

    def agent(self, call: NodeCall, request: ChatRequest, role: str | None,
              index: int | None, key: str | None = None) -> Served:
        wanted = key or turn_call(1, role, index)
        for action in call_records(self._exec(call).actions, wanted):
            if not isinstance(action, (AgentAnswer, CallFailure)):
                continue
            if self.strict and action.request_hash != request.request_hash:
                raise ReplayDivergence(
                    f"{call.node!r} execution {call.occurrence} call {wanted!r} now sends a "
                    "different request than the recording (prompt, model or inputs drifted)",
                    node=call.node, occurrence=call.occurrence, call=wanted)
            if isinstance(action, CallFailure):
                raise _recorded_failure(action)
            return Served.of_record(action, label=action.label)
        raise NodeFailure("missing_context", f"no recorded answer for {call.node!r} call "
                          f"{wanted!r}")

    def human_call(self, call: NodeCall, use: ToolUse) -> HumanAnswer | None:
        for action in self._exec(call).actions:
            if isinstance(action, HumanDecision) and action.call == use.call:
                return HumanAnswer(decision=action.decision, data=action.data,
                                   label=action.label, recorded=True)
        return None  # never answered when recorded: it pauses there again

    def tool_call(self, call: NodeCall, use: ToolUse,
                  ctx: ToolContext) -> tuple[Any, CallLabel]:
        self._check_blocked(call)
        ctx.captured.extend(self.reflections.pop((call.node, call.occurrence), ()))
        for action in call_records(self._exec(call).actions, use.call):
            if isinstance(action, ToolCall) and self.strict and action.args_hash != use.args_hash:
                raise ReplayDivergence(
                    f"{call.node!r} execution {call.occurrence} call {use.call!r} now passes "
                    "other arguments than the recording", node=call.node,
                    occurrence=call.occurrence, call=use.call)
            if isinstance(action, ToolResult):
                return action.result, action.label
            if isinstance(action, CallFailure):
                raise _recorded_failure(action)
        raise NodeFailure("missing_context", f"no recorded result for {call.node!r} call "
                          f"{use.call!r}")

    def tool(self, call: NodeCall, node: ToolNode, args: dict[str, Any],
             ctx: ToolContext) -> tuple[Any, CallLabel]:
        self._check_blocked(call)
        ex = self._exec(call)
        ctx.captured.extend(self.reflections.get((call.node, call.occurrence), ()))
        for action in ex.actions:
            if isinstance(action, ToolResult):
                return RecordedTool.of(ex, action), action.label
            if isinstance(action, CallFailure):
                raise _recorded_failure(action)
        error = ex.error or {"type": "missing_context", "message": "no recorded tool result"}
        raise NodeFailure(str(error.get("type")), str(error.get("message")))

    def route(self, call: NodeCall, node: RouterNode) -> str | None:
        route = self._exec(call).route
        for action in self._exec(call).actions:
            if isinstance(action, RouteTaken) and action.label == "simulated":
                return route  # a forced route is part of what was recorded
        return None

    def human(self, call: NodeCall, node: ApprovalNode) -> HumanAnswer | None:
        for action in self._exec(call).actions:
            if isinstance(action, HumanDecision):
                return HumanAnswer(decision=action.decision, data=action.data,
                                   memory_updates=action.memory_updates,
                                   label=action.label, recorded=True,
                                   answered_by=self.answered_by.get((call.node,
                                                                     call.occurrence), ""))
        return None

    def subgraph(self, call: NodeCall, node: SubgraphNode, child_input: dict[str, Any],
                 run_child: Callable[[], ChildResult]) -> ChildResult:
        self._check_blocked(call)
        for action in self._exec(call).actions:
            if isinstance(action, ChildOutcome):
                return ChildResult(child_run_id=action.child_run_id, status=action.status,
                                   output=action.output, label=action.label,
                                   cost_usd=action.cost_usd, input_tokens=action.input_tokens,
                                   output_tokens=action.output_tokens, tainted=action.tainted)
        raise NodeFailure("missing_context", f"no recorded child run for {call.node!r}")

    def child(self, call: NodeCall, node: SubgraphNode) -> Any:
        """Never reached: every child run is served from the recording."""
        return self


def _recorded_failure(action: CallFailure) -> NodeFailure:
    error = action.error
    return NodeFailure(str(error.get("type")), str(error.get("message")), label=action.label)


def _comparable(event: AnyEvent) -> str:
    wire = event.to_wire()
    payload = {k: v for k, v in wire["payload"].items() if k not in VOLATILE}
    if wire["type"] == "subgraph.started":
        payload.pop("child_run_id", None)
    return canonical_json([wire["type"], wire["node"], wire["occurrence"], wire["iteration"],
                           payload])


def _describe(event: Event | None) -> str:
    if event is None:
        return "nothing"
    return f"{event.type} of {event.node!r}" if event.node else event.type


def _differing(want: AnyEvent, got: Event) -> list[str]:
    """Envelope and payload fields that differ (what drifted: a prompt, a fingerprint…)."""
    a, b = json.loads(_comparable(want)), json.loads(_comparable(got))  # type: ignore[arg-type]
    names = ["type", "node", "occurrence", "iteration"]
    fields = [n for n, x, y in zip(names, a[:4], b[:4], strict=True) if x != y]
    return fields + sorted(k for k in set(a[4]) | set(b[4]) if a[4].get(k) != b[4].get(k))


class _ComparingStore(MemoryStore):
    """A scratch store that checks each appended event against the recorded log; graphs
    (a subgraph node's child graph, for its fingerprint) come from ``graphs``."""

    def __init__(self, recorded: Sequence[AnyEvent], strict: bool,
                 graphs: GraphStore | None = None) -> None:
        super().__init__()
        self.recorded = {e.seq: e for e in recorded}
        self.strict = strict
        self.graphs = graphs

    def load_graph(self, graph_id: str, version: int | None = None) -> GraphSpec:
        if self.graphs is not None:
            return self.graphs.load_graph(graph_id, version)
        return super().load_graph(graph_id, version)

    def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> None:
        for event in events:
            want = self.recorded.get(event.seq)
            got = _comparable(event)  # type: ignore[arg-type]
            if self.strict and (want is None or _comparable(want) != got):
                fields = _differing(want, event) if want is not None else []
                raise ReplayDivergence(
                    f"replay diverged at seq {event.seq}: recorded "
                    f"{_describe(want)}, replay produced {_describe(event)}"
                    + (f" (differs in: {', '.join(fields)})" if fields else ""),
                    seq=event.seq, node=event.node, fields=fields,
                    expected=want.to_wire() if want else None, found=event.to_wire())
        super().append(run_id, events, expected_seq=expected_seq)


def replay_events(events: Sequence[AnyEvent], graph: GraphSpec, *, strict: bool = True,
                  env: Environment | None = None, graphs: GraphStore | None = None) -> RunState:
    """Re-drive a recorded log through ``graph``; returns the re-driven final state.

    ``graphs`` holds the graphs subgraph nodes run (their identity is part of a subgraph
    node's fingerprint); without it a subgraph node's child graph counts as missing.
    """
    recorded = fold(events)
    store = _ComparingStore(events, strict, graphs)
    runner = Runner(graph, store=store, run_id=recorded.run_id, env=env or Environment(),
                    oracle=RecordedOracle(recorded, strict=strict, events=events))
    # a memo hit is re-served in the form the recording holds it (logs written before
    # ``node.reused`` hold the multi-event form; a log holds one form or the other)
    runner.one_event_reuse = not any(type(e) is NodeCompleted and e.memo for e in events)
    opening = []
    for event in events:
        if isinstance(event, (NodeStarted, NodeReused)):
            break
        opening.append(event)
    store.append(recorded.run_id, opening, expected_seq=0)
    for event in opening:
        evolve(runner.state, event)
    if runner.state.status == "running":
        runner.resume_loop()
    if strict and runner.state.version != recorded.version:
        raise ReplayDivergence(
            f"replay ended at seq {runner.state.version} but the recording has "
            f"{recorded.version} events", expected=recorded.version, found=runner.state.version)
    return runner.state


def replay(run_id: str, *, store: Store, strict: bool = True, graph: GraphSpec | None = None,
           env: Environment | None = None) -> RunState:
    """Strictly replay a stored run through its graph's latest version (or ``graph``).

    A fork is re-driven through the latest version with the fork's changes (its lineage's,
    then its own) applied again — what it would run under today — never through the
    effective graph it recorded, which cannot drift: an edit to a node its tail ran is
    ``replay_divergence`` as it is for a primary run; a change that no longer applies to
    the latest version (its node renamed or removed) is one too.
    """
    events = store.read(run_id)
    recorded = fold(events)
    if graph is None:
        latest = store.load_graph(recorded.graph_id)
        forked = forked_event(events)
        graph = latest if forked is None else _current_effective(latest, forked, store)
    return replay_events(events, graph, strict=strict, env=env, graphs=store)


def _current_effective(latest: GraphSpec, forked: RunForked, store: Store) -> GraphSpec:
    """``latest`` with a fork's combined changes applied in lineage order (a later change
    refining an earlier one, as the fork did)."""
    from forklab.engine.fork.apply import effective_graph
    from forklab.engine.fork.changes import parse_changes

    versions = store.graph_versions(latest.id)
    version = versions[-1] if versions else None
    try:
        return effective_graph(latest, parse_changes(forked.changes), one_request=False)
    except ForklabError as exc:
        raise ReplayDivergence(
            f"the fork's changes no longer apply to version {version} of graph "
            f"{latest.id!r} ({exc.message}); the graph drifted under the fork — fork the "
            "base again against this version", graph_id=latest.id, graph_version=version,
            cause=exc.code) from None
