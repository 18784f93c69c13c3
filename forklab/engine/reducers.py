"""Pure reducers: ``evolve(state, event)`` and ``fold(events)``.

"Pure" here means: the next state is a function of the previous state and the event only —
no clock, no I/O, no randomness, no graph lookups (everything a reducer needs is in the
event). For speed the fold owns one state object and updates it in place; callers that keep
a state across further folding take ``state.copy()``.

The live runner applies every event it appends through this same ``evolve``, so the state a
run has while it executes and the state rebuilt from its log are the same by construction;
``tests/engine/test_fold_invariant.py`` checks it after every event of every scenario.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, assert_never

from forklab.engine.actions import (
    AgentAnswer,
    AgentAsked,
    CallFailure,
    CallRecord,
    ChildOutcome,
    ChildStarted,
    HumanDecision,
    RouteTaken,
    ToolCall,
    ToolResult,
    answered,
    asked,
    call_of,
)
from forklab.engine.calls import call_key
from forklab.engine.canonical import merge_patch
from forklab.engine.collector import collector_paused
from forklab.engine.errors import EventGapError
from forklab.engine.events import (
    EVENT_TYPES,
    AgentRequested,
    AgentResponded,
    AnyEvent,
    CallFailed,
    ChangeApplied,
    EffectSuppressed,
    Event,
    HumanAnswered,
    HumanRequested,
    MemoryWritten,
    NodeCompleted,
    NodeFailed,
    NodeInterrupted,
    NodeReused,
    NodeStarted,
    ReflectionDiscarded,
    RouteDecided,
    RunBlocked,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunForked,
    RunStarted,
    SubgraphCompleted,
    SubgraphStarted,
    ToolCalled,
    ToolReturned,
    TraceImported,
)
from forklab.engine.state import Call, Execution, ForkOrigin, NodesSoFar, RunState
from forklab.engine.status import ExecutionStatus, RunKind, RunStatus


def check_next(state: RunState, event: AnyEvent) -> None:
    """Raise EventGapError unless ``event`` is the next event of ``state``'s run."""
    if event.seq != state.version + 1:
        raise EventGapError(
            f"event seq {event.seq} does not follow seq {state.version} of run "
            f"{state.run_id or event.run_id!r}; expected seq {state.version + 1}",
            run_id=event.run_id, expected_seq=state.version + 1, found_seq=event.seq,
        )
    if state.run_id and event.run_id != state.run_id:
        raise EventGapError(
            f"event seq {event.seq} belongs to run {event.run_id!r}, not {state.run_id!r}",
            run_id=state.run_id,
        )


def fold(events: Iterable[AnyEvent], state: RunState | None = None) -> RunState:
    """Fold events (from seq ``state.version + 1``) into a state; gaps raise EventGapError.

    ``state`` is updated in place and returned; omit it to start from an empty state.
    """
    state = RunState() if state is None else state
    with collector_paused():
        for event in events:
            # check_next's test, inline (a call per event was a twentieth of the fold)
            if event.seq != state.version + 1 or (state.run_id
                                                  and event.run_id != state.run_id):
                check_next(state, event)
            evolve(state, event)
    return state


WAYPOINTS = 8
"""How many states :func:`fold_with_waypoints` keeps along a log (evenly spaced)."""


def fold_with_waypoints(events: Sequence[AnyEvent]) -> tuple[RunState, tuple[RunState, ...]]:
    """``fold(events)`` of a whole log (from seq 1), keeping :data:`WAYPOINTS` branches of
    the state taken at evenly spaced seqs on the way: what :func:`fold_to` starts from, so
    the state at any seq of the log costs at most an eighth of its fold, not a second fold.

    A branch (:meth:`RunState.branch`) shares the finished executions, calls and values
    with the state it was taken from, and folding on into either never changes the other:
    the waypoints cost one pointer per execution, memory key and call each.
    """
    state = RunState()
    waypoints: list[RunState] = []
    step = -(-len(events) // WAYPOINTS) or 1
    with collector_paused():
        for start in range(0, len(events), step):
            if start:
                waypoints.append(state.branch())
            fold(events[start:start + step], state)
    return state, tuple(waypoints)


def fold_to(events: Sequence[AnyEvent], seq: int,
            waypoints: Sequence[RunState] = ()) -> RunState:
    """The state at ``seq`` of a whole log (``events`` from seq 1, contiguous): a branch
    of the last of ``waypoints`` (:func:`fold_with_waypoints` of the same log) at or
    before ``seq``, folded on to it, else the log folded from seq 1. Either way exactly
    ``fold`` of the events up to ``seq``."""
    start = max((w for w in waypoints if w.version <= seq), key=lambda w: w.version,
                default=None)
    if start is None:
        return fold(e for e in events if e.seq <= seq)
    return fold(events[start.version:seq], start.branch())


def _current(state: RunState, event: AnyEvent) -> Execution:
    if state.current is None:
        raise EventGapError(
            f"{event.type} at seq {event.seq} arrived outside any node execution",
            run_id=event.run_id, seq=event.seq,
        )
    return state.current


# An execution still open when its run ends ends with the run's status.
_EXECUTION_END: dict[RunStatus, ExecutionStatus] = {
    RunStatus.COMPLETED: "completed", RunStatus.FAILED: "failed",
    RunStatus.BLOCKED: "blocked", RunStatus.CANCELLED: "cancelled",
}


def _finish(state: RunState, status: RunStatus, at: float) -> None:
    state.status = status
    state.finished_at = at
    if state.current is not None:
        state.current.status = _EXECUTION_END[status]
        state.current.finished_at = at
        state.current.prior_iteration_nodes = []  # see _complete_node
        state.executions.append(state.current)
        state.current = None


def evolve(state: RunState, event: Event) -> RunState:
    """Apply one event to ``state`` (in place) and return it: the handler of its type.

    A table by exact class (:data:`_HANDLERS`, checked at import to cover every event
    type): a ``match`` tried the classes one after another, nine ``isinstance`` tests
    for a route decision."""
    state.version = event.seq
    handler = _HANDLERS.get(type(event))
    if handler is None:
        handler = _handler_of(event)
    handler(state, event)
    return state


def _asked(state: RunState, event: AgentRequested) -> None:
    _current(state, event).actions.append(asked(
        event.seq, event.request_hash, event.role, event.index, event.call))


def _answered(state: RunState, event: AgentResponded) -> None:
    _record_call(state, _current(state, event), answered(
        event.seq, event.request_hash, event.text, event.role, event.index,
        event.model, event.input_tokens, event.output_tokens, event.cost_usd,
        event.latency_ms, event.label, event.call,
        None if event.tool_calls is None else tuple(event.tool_calls), event.finish_reason))


def _tool_called(state: RunState, event: ToolCalled) -> None:
    declared = event.trusted is not None  # a workflow's tool: its effect is not in a graph
    _current(state, event).actions.append(ToolCall(
        seq=event.seq, args_hash=event.args_hash, args=event.args, tool=event.tool,
        call=event.call, call_id=event.call_id, effect=event.effect if declared else None,
        trusted=event.trusted))


def _tool_returned(state: RunState, event: ToolReturned) -> None:
    _record_call(state, _current(state, event), ToolResult(
        seq=event.seq, result=event.result, label=event.label, call=event.call))


def _call_failed(state: RunState, event: CallFailed) -> None:
    _record_call(state, _current(state, event), CallFailure(
        seq=event.seq, kind=event.kind, role=event.role, index=event.index,
        model=event.model, label=event.label, error=event.error,
        request_hash=event.request_hash, call=event.call))


def _route_decided(state: RunState, event: RouteDecided) -> None:
    current = _current(state, event)
    current.route = event.to
    current.actions.append(RouteTaken(seq=event.seq, to=event.to,
                                      reason=event.reason, label=event.label))


def _run_started(state: RunState, event: RunStarted) -> None:
    state.run_id = event.run_id
    state.status = RunStatus.RUNNING
    state.graph_id, state.graph_version = event.graph_id, event.graph_version
    state.graph_hash, state.run_kind = event.graph_hash, RunKind(event.run_kind)
    state.replay_version, state.label = event.replay_version, event.label
    state.parent_run_id = event.parent_run_id
    state.input = dict(event.input)
    state.memory = dict(event.input)
    state.taint = {key for key in event.tainted_input if key in state.memory}
    state.frontier = [event.start]
    state.started_at = event.at


def _change_applied(state: RunState, event: ChangeApplied) -> None:
    if event.change.get("kind") == "input_patch":
        state.input = merge_patch(state.input, event.change["patch"])


def _human_requested(state: RunState, event: HumanRequested) -> None:
    state.status = RunStatus.PAUSED
    state.pending_human = {"node": event.node, "prompt": event.prompt,
                           "context": event.context, "seq": event.seq,
                           **({"call": event.call} if event.call is not None else {})}
    _current(state, event).status = "paused"


def _human_answered(state: RunState, event: HumanAnswered) -> None:
    current = _current(state, event)
    state.status = RunStatus.RUNNING
    state.pending_human = None
    current.status = "running"
    _record_call(state, current, HumanDecision(
        seq=event.seq, decision=event.decision, data=event.data,
        memory_updates=event.memory_updates, label=event.label, call=event.call))


def _effect_suppressed(state: RunState, event: EffectSuppressed) -> None:
    state.suppressed_effects.append(
        {"node": event.node, "inputs": event.inputs, "reason": event.reason})


def _subgraph_started(state: RunState, event: SubgraphStarted) -> None:
    _current(state, event).actions.append(
        ChildStarted(seq=event.seq, child_run_id=event.child_run_id))


def _subgraph_completed(state: RunState, event: SubgraphCompleted) -> None:
    _record_call(state, _current(state, event), ChildOutcome(
        seq=event.seq, child_run_id=event.child_run_id, status=event.status,
        output=event.output, label=event.label, cost_usd=event.cost_usd,
        input_tokens=event.input_tokens, output_tokens=event.output_tokens,
        tainted=tuple(event.tainted)))


def _reflection_discarded(state: RunState, event: ReflectionDiscarded) -> None:
    state.discarded_reflections.append(
        {"node": event.node, "store": event.store, "key": event.key, "value": event.value})


def _trace_imported(state: RunState, event: TraceImported) -> None:
    """What the trace import says about its calls stays in the log (read by the surfaces
    that show it); the state is the calls' own events'."""


def _node_failed(state: RunState, event: NodeFailed) -> None:
    current = _current(state, event)
    current.status, current.end_seq = "failed", event.seq
    current.finished_at, current.error = event.at, dict(event.error)
    state.pending_writes, state.pending_deletes, state.pending_taint = {}, [], {}
    state.error = {"code": "node_failed", "node": event.node, **event.error}
    current.prior_iteration_nodes = []  # see _complete_node
    state.executions.append(current)
    state.current = None


def _run_completed(state: RunState, event: RunCompleted) -> None:
    _finish(state, RunStatus.COMPLETED, event.at)


def _run_failed(state: RunState, event: RunFailed) -> None:
    state.error = state.error or dict(event.error)
    _finish(state, RunStatus.FAILED, event.at)


def _run_blocked(state: RunState, event: RunBlocked) -> None:
    _finish(state, RunStatus.BLOCKED, event.at)


def _run_cancelled(state: RunState, event: RunCancelled) -> None:
    state.error = {"code": "cancelled", "message": event.reason or "cancelled"}
    state.pending_writes, state.pending_deletes, state.pending_taint = {}, [], {}
    _finish(state, RunStatus.CANCELLED, event.at)


Handler = Callable[[RunState, Any], None]


def _handler_of(event: Event) -> Handler:
    """The handler of a subclass of an event type (by its nearest listed base)."""
    for cls in type(event).__mro__:
        found = _HANDLERS.get(cls)
        if found is not None:
            return found
    raise TypeError(f"no reducer for event {type(event).__name__} (seq {event.seq})")


def _holders(prefix: RunState) -> tuple[tuple[str, int], ...]:
    """Which run's log holds each inherited execution: ``(run_id, first position)`` pairs.

    The prefix was folded from the log of ``prefix.run_id``; if that run is itself a fork,
    its own executions start at its ``prefix_executions`` and the ones before it are held
    as its own state says.
    """
    inherited = len(prefix.executions)
    parent = prefix.fork
    if parent is None:
        return ((prefix.run_id, 0),)
    held = [h for h in parent.holders if h[1] < inherited]
    if parent.prefix_executions < inherited or not held:
        held.append((prefix.run_id, parent.prefix_executions))
    return tuple(held)


def _apply_fork(state: RunState, event: RunForked) -> None:
    # A live fork hands over the state its wire prefix was made from: branching it gives
    # the state decoding the wire form gives (canonically equal), without the copy. A
    # decoded event has none (and JSON never holds a RunState).
    given = event.prefix
    prefix = (given.branch() if isinstance(given, RunState)
              else RunState.from_wire(event.prefix_state))
    holders = _holders(prefix)
    for name in RunState.__slots__:
        if name not in {"run_id", "version", "run_kind", "label", "parent_run_id",
                        "started_at", "graph_id", "graph_version", "graph_hash",
                        "replay_version"}:
            setattr(state, name, getattr(prefix, name))
    state.status = RunStatus.RUNNING
    state.error = None
    state.finished_at = None
    state.fork = ForkOrigin(
        base_run_id=event.base_run_id, fork_sequence_id=event.fork_sequence_id,
        fork_node_id=event.fork_node_id, fork_group_id=event.fork_group_id,
        tail_from_call=len(state.calls), prefix_executions=len(state.executions),
        holders=holders, one_call=event.one_call)
    state.changes = list(event.changes)


def _start_node(state: RunState, event: NodeStarted | NodeReused) -> None:
    node = event.node or ""
    iteration = event.iteration or 1
    execution = Execution(
        node=node, kind=event.kind, occurrence=event.occurrence or 1, iteration=iteration,
        start_seq=event.seq, fingerprint=event.fingerprint, reads=event.reads,
        started_at=event.at, prior_iteration=state.iteration,
        prior_iteration_nodes=NodesSoFar(state.iteration_nodes),
    )
    if iteration != state.iteration:
        state.iteration = iteration
        state.iteration_nodes = []
    state.iteration_nodes.append(node)
    state.occurrences[node] = execution.occurrence
    if node in state.frontier:
        state.frontier.remove(node)
    state.current = execution


def _memory_written(state: RunState, event: MemoryWritten) -> None:
    if state.current is None:  # outside a node: a fork change, applied at once
        if event.deleted:
            state.memory.pop(event.key, None)
            state.taint.discard(event.key)
        else:
            state.memory[event.key] = event.value
            (state.taint.add if event.tainted else state.taint.discard)(event.key)
        return
    if event.deleted:
        state.pending_writes.pop(event.key, None)
        state.pending_deletes.append(event.key)
    else:
        state.pending_writes[event.key] = event.value
        if event.key in state.pending_deletes:
            state.pending_deletes.remove(event.key)
    state.pending_taint[event.key] = event.tainted


def _complete_node(state: RunState, event: NodeCompleted) -> None:
    _close_node(state, _current(state, event), event.seq, event.at, event.next, event.waiting,
                memo=event.memo)


def _reuse_node(state: RunState, event: NodeReused) -> None:
    """``node.reused``: the node's start, its served action records, its writes and its
    completion, applied as the multi-event form would apply them one by one
    (``_start_node``, a record per action event, ``memory.written`` each, ``_close_node``),
    in one pass: the execution is made finished, with no running-node bookkeeping to undo
    (its iteration's node list as it started, the pending writes and taint), and each
    write's taint applied as it lands. The same state, field for field (property tests
    compare the one-event and multi-event folds over generated graphs and forks). The
    event's records (each with the event's seq) become the execution's own: shared, not
    copied."""
    node = event.node or ""
    iteration = event.iteration or 1
    occurrence = event.occurrence or 1
    prior_iteration = state.iteration
    if iteration != prior_iteration:
        state.iteration = iteration
        state.iteration_nodes = []
    state.iteration_nodes.append(node)
    state.occurrences[node] = occurrence
    frontier = state.frontier
    if node in frontier:
        frontier.remove(node)
    seq, at = event.seq, event.at
    current = Execution(
        node=node, kind=event.kind, occurrence=occurrence, iteration=iteration,
        start_seq=seq, fingerprint=event.fingerprint, reads=event.reads, started_at=at,
        status="completed", end_seq=seq, finished_at=at, writes=dict(event.writes),
        deletes=list(event.deletes), next=list(event.next), memo=True,
        prior_iteration=prior_iteration, prior_iteration_nodes=[])
    state.current = current  # what the records are counted against (as in the fold)
    for record in event.actions:
        current.actions.append(record)
        match record:
            case RouteTaken():
                current.route = record.to
            case AgentAsked() | ToolCall() | ChildStarted():
                pass  # what a call was made with: recorded, not itself a call
            case _:
                _count_call(state, current, record)
    memory, taint = state.memory, state.taint
    for key in current.deletes:  # deletes first, then writes (a key may be both)
        memory.pop(key, None)
        taint.discard(key)
    tainted = event.tainted
    for key, value in current.writes.items():
        memory[key] = value
        (taint.add if key in tainted else taint.discard)(key)
    state.pending_writes, state.pending_deletes, state.pending_taint = {}, [], {}
    state.executions.append(current)
    state.current = None
    _arrive(state, current, current.next, event.waiting)


def _record_call(state: RunState, current: Execution, record: CallRecord) -> None:
    current.actions.append(record)
    _count_call(state, current, record)


def _count_call(state: RunState, current: Execution, record: CallRecord) -> None:
    """What a call adds beyond its record: its label, its entry in ``calls``, the totals.

    Reused answers count in the totals too: their cost is inherited from the base run (what
    the tail itself paid is the sum over calls labelled live/changed)."""
    label, seq = record.label, record.seq
    current.labels.append(label)
    node, occurrence = current.node, current.occurrence
    match record:
        case AgentAnswer(cost_usd=cost, input_tokens=tokens_in, output_tokens=tokens_out):
            state.calls.append(Call(seq=seq, node=node, occurrence=occurrence, kind="agent",
                                    label=label, role=record.role, index=record.index,
                                    model=record.model, input_tokens=tokens_in,
                                    output_tokens=tokens_out, cost_usd=cost,
                                    call=call_key(node, occurrence, call_of(record))))
            current.input_tokens += tokens_in
            current.output_tokens += tokens_out
            state.input_tokens += tokens_in
            state.output_tokens += tokens_out
            if cost is None:
                state.unpriced_calls += 1
            else:
                current.cost_usd += cost
                state.cost_usd += cost
        case CallFailure():
            state.calls.append(Call(seq=seq, node=node, occurrence=occurrence,
                                    kind=record.kind, label=label, role=record.role,
                                    index=record.index, model=record.model, cost_usd=0.0,
                                    call=call_key(node, occurrence, call_of(record))))
        case ChildOutcome(cost_usd=cost, input_tokens=tokens_in, output_tokens=tokens_out):
            state.calls.append(Call(seq=seq, node=node, occurrence=occurrence, kind="subgraph",
                                    label=label, input_tokens=tokens_in,
                                    output_tokens=tokens_out, cost_usd=cost))
            state.input_tokens += tokens_in
            state.output_tokens += tokens_out
            state.cost_usd += cost
        case ToolResult():
            state.calls.append(Call(seq=seq, node=node, occurrence=occurrence, kind="tool",
                                    label=label, cost_usd=0.0,
                                    call=call_key(node, occurrence, call_of(record))))
        case HumanDecision():
            state.calls.append(Call(seq=seq, node=node, occurrence=occurrence, kind="human",
                                    label=label, cost_usd=0.0))
        case _:
            assert_never(record)


def _close_node(state: RunState, current: Execution, seq: int, at: float,
                next_nodes: list[str], waiting_for: list[str], *, memo: bool) -> None:
    """Commit the node's buffered writes and complete it (``node.completed``)."""
    for key in state.pending_deletes:
        state.memory.pop(key, None)
        state.taint.discard(key)
    for key, value in state.pending_writes.items():
        state.memory[key] = value
    for key, tainted in state.pending_taint.items():
        if key in state.memory:
            (state.taint.add if tainted else state.taint.discard)(key)
    current.writes = state.pending_writes
    current.deletes = state.pending_deletes
    state.pending_writes, state.pending_deletes, state.pending_taint = {}, [], {}
    current.status, current.end_seq, current.finished_at = "completed", seq, at
    current.next, current.memo = list(next_nodes), memo
    # Only a running execution needs the iteration bookkeeping it would restore if
    # interrupted; kept on finished ones it made states, snapshots and a fork's copied
    # prefix grow with the square of a run's length (issue 11).
    current.prior_iteration_nodes = []
    state.executions.append(current)
    state.current = None
    _arrive(state, current, next_nodes, waiting_for)


def _arrive(state: RunState, current: Execution, next_nodes: list[str],
            waiting_for: list[str]) -> None:
    """The completed ``current``'s successors join the frontier (``next_nodes``) or record
    its arrival (``waiting_for``: joins still missing a predecessor)."""
    frontier = state.frontier
    # a fan-out start names N successors: checked against a set of the frontier, not by a
    # scan of the growing list per successor (N² for a fan-out of N)
    queued = set(frontier) if len(next_nodes) > 4 else None
    for successor in next_nodes:
        if successor in state.arrivals:
            del state.arrivals[successor]
        if successor not in (frontier if queued is None else queued):
            frontier.append(successor)
            if queued is not None:
                queued.add(successor)
    for waiting in waiting_for:
        arrived = state.arrivals.setdefault(waiting, [])
        # A first execution (occurrence 1) cannot have arrived before: arrivals are appended
        # only here, when a node completes, and its occurrence counts its completions' starts.
        # Skipping the scan keeps a join of N arrivals linear, not N² (issue 11).
        if current.occurrence == 1 or current.node not in arrived:
            arrived.append(current.node)


def _interrupt_node(state: RunState, event: NodeInterrupted) -> None:
    current = _current(state, event)
    # Kept on the interrupted attempt for the record (never applied): resuming serves a
    # redacted recorded tool result with the writes it really made.
    current.writes, current.deletes = state.pending_writes, state.pending_deletes
    # The interrupted attempt's calls leave the totals: the re-execution records them again
    # (served back as ``reused``), and a call must count once.
    state.input_tokens -= current.input_tokens
    state.output_tokens -= current.output_tokens
    state.cost_usd -= current.cost_usd
    state.unpriced_calls -= sum(1 for c in state.calls
                                if c.seq > current.start_seq and c.cost_usd is None)
    state.calls = [c for c in state.calls if c.seq <= current.start_seq]
    state.pending_writes, state.pending_deletes, state.pending_taint = {}, [], {}
    state.pending_human = None
    state.status = RunStatus.RUNNING
    state.occurrences[current.node] = current.occurrence - 1
    if state.occurrences[current.node] == 0:
        del state.occurrences[current.node]
    state.iteration = current.prior_iteration
    state.iteration_nodes = list(current.prior_iteration_nodes)
    current.prior_iteration_nodes = []  # only a running execution needs it (linear forks)
    state.frontier.insert(0, current.node)
    current.status, current.end_seq = "interrupted", event.seq
    state.interrupted.append(current)
    state.current = None


def rewind_to_boundary(state: RunState) -> RunState:
    """Drop an open node's partial work (a snapshot taken mid-node): the node will re-run.

    The state returned is the one the run had at the boundary before that node started,
    except for ``version``.
    """
    if state.current is not None:
        current = state.current
        _interrupt_node(state, NodeInterrupted(run_id=state.run_id, seq=state.version,
                                               reason="snapshot inside a node"))
        state.interrupted.remove(current)
    return state


_HANDLERS: dict[type, Handler] = {
    MemoryWritten: _memory_written, NodeStarted: _start_node, NodeCompleted: _complete_node,
    AgentRequested: _asked, AgentResponded: _answered, ToolCalled: _tool_called,
    ToolReturned: _tool_returned, CallFailed: _call_failed, RouteDecided: _route_decided,
    NodeReused: _reuse_node, RunStarted: _run_started, RunForked: _apply_fork,
    ChangeApplied: _change_applied, HumanRequested: _human_requested,
    HumanAnswered: _human_answered, EffectSuppressed: _effect_suppressed,
    SubgraphStarted: _subgraph_started, SubgraphCompleted: _subgraph_completed,
    ReflectionDiscarded: _reflection_discarded, NodeFailed: _node_failed,
    NodeInterrupted: _interrupt_node, RunCompleted: _run_completed, RunFailed: _run_failed,
    RunBlocked: _run_blocked, RunCancelled: _run_cancelled, TraceImported: _trace_imported,
}
"""The reducer of each event type, by exact class (:func:`evolve`)."""
if set(_HANDLERS) != set(EVENT_TYPES.values()):  # what ``assert_never`` checked statically
    raise AssertionError("every event type needs exactly one reducer")  # pragma: no cover
