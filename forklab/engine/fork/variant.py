"""Executing a prepared fork: the variant's opening events, then the tail.

The variant's log opens with ``run.started`` (kind ``counterfactual``), ``run.forked`` (the
prefix state, the combined changes, the effective graph, policy and budget), one
``change.applied`` per change applied at the point, then the memory writes those changes
make; the tail then runs through the ordinary runner and planner with a
:class:`~forklab.engine.fork.tail.ForkOracle`. :func:`fork_runner` rebuilds that oracle from
the log to answer or resume a fork, its spend counted again from the calls already made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from forklab.engine.actions import ChildOutcome, RouteTaken
from forklab.engine.canonical import canonical_json
from forklab.engine.collector import collector_paused
from forklab.engine.environment import Environment
from forklab.engine.errors import RunNotFound
from forklab.engine.events import (
    PREFIX_FROM_STATE,
    REPLAY_VERSION,
    AnyEvent,
    ChangeApplied,
    Event,
    MemoryWritten,
    RunForked,
    RunStarted,
)
from forklab.engine.fork.apply import config_targets
from forklab.engine.fork.base import load_base
from forklab.engine.fork.changes import parse_changes
from forklab.engine.fork.effective import DELETE
from forklab.engine.fork.lineage import forked_event
from forklab.engine.fork.memo import Recording, SharedMemo
from forklab.engine.fork.onecall import one_call_runner
from forklab.engine.fork.points import ForkPoint
from forklab.engine.fork.spend import Spend
from forklab.engine.fork.tail import ForkOracle, Policy
from forklab.engine.fork.wire import Budget
from forklab.engine.graph import parse_stored_graph
from forklab.engine.oracle import HumanAnswer, LiveOracle
from forklab.engine.reducers import fold
from forklab.engine.runner import CancelToken, Runner
from forklab.engine.scheduler import overlapping
from forklab.engine.state import RunState
from forklab.engine.status import RunKind
from forklab.engine.store import Store, graph_hash
from forklab.engine.telemetry import tracer

if TYPE_CHECKING:
    from forklab.engine.fork.base import BaseRun
    from forklab.engine.fork.plan import ForkPlan


def begin_variant(runner: Runner, plan: ForkPlan, *, label: str,
                  fork_group_id: str | None, ignore_budget: bool) -> None:
    """Append the variant's opening events: identity, prefix, changes, memory writes.

    Like a base load, this builds state as large as the prefix (the fold, its wire form
    and the fork's own copy of it) that all stays alive, so the cyclic collector is paused
    meanwhile (see :func:`~forklab.engine.collector.collector_paused`).
    """
    with collector_paused():
        for cls, fields in _opening(plan, label=label, fork_group_id=fork_group_id,
                                    ignore_budget=ignore_budget,
                                    graph_hash=graph_hash(plan.graph)):
            runner.emit(cls, **fields)


Opening = list[tuple[type[Event], dict[str, Any]]]


def _opening(plan: ForkPlan, *, label: str, fork_group_id: str | None,
             ignore_budget: bool, graph_hash: str) -> Opening:
    """The variant's opening events, as classes and fields (seqs and times are given when
    they are emitted)."""
    base = plan.base
    opening: Opening = [
        (RunStarted, {
            "graph_id": base.state.graph_id, "graph_version": base.state.graph_version,
            "graph_hash": graph_hash, "input": plan.new_input, "start": plan.graph.start,
            "run_kind": RunKind.COUNTERFACTUAL, "replay_version": REPLAY_VERSION,
            "label": label, "parent_run_id": base.run_id}),
        (RunForked, {
            "base_run_id": base.run_id, "fork_sequence_id": plan.point.seq,
            "fork_node_id": plan.effective.node, "prefix_state": PREFIX_FROM_STATE,
            "prefix": plan.prefix_state, "changes": plan.combined,
            "inherited_changes": len(plan.inherited), "graph": plan.graph.shared_wire(),
            "fork_group_id": fork_group_id, "policy": plan.policy.wire(),
            "budget": plan.budget.wire(), "memoize": plan.memoize,
            "ignore_budget": ignore_budget,
            "estimate": {**plan.estimate.wire(), "warnings": plan.warnings,
                         "point_notes": plan.notes},
            "point": plan.point.to_wire(), "prefix_call": plan.effective.call, "routes_used": plan.routes_used,
            "prefix_ref": plan.prefix_ref,
            **({"one_call": plan.one_call} if plan.one_call is not None else {})}),
        *((ChangeApplied, {"change": item.wire()}) for item in plan.application.applied),
    ]
    for key, value in plan.application.writes():
        if value is DELETE:
            opening.append((MemoryWritten, {"key": key, "value": None, "deleted": True}))
        else:
            opening.append((MemoryWritten, {"key": key, "value": value}))
    return opening


def launch_before_opening(runner: Runner, plan: ForkPlan, *, label: str,
                          fork_group_id: str | None, ignore_budget: bool) -> None:
    """Start the tail's first model call before :func:`begin_variant` builds the opening
    (hashing the fork's graph is ~6 ms for 1,002 nodes): the opening is folded without its
    hash into a scratch state — the state the real opening folds to, but for the hash,
    which nothing predicted reads — and the runner launches from it
    (:meth:`~forklab.engine.runner.Runner.launch_opening`). Only where something may run
    beside the head: a prefix whose frontier holds more than one node (a chain's single
    next node executes in place, as ever)."""
    if plan.one_call is not None:  # its one call is asked after the opening, in order
        return
    if len(plan.prefix_state.frontier) < 2 or not overlapping(runner.max_concurrency,
                                                              runner.oracle):
        return
    opening = _opening(plan, label=label, fork_group_id=fork_group_id,
                       ignore_budget=ignore_budget, graph_hash="")
    with collector_paused():  # a branch of the prefix, kept by the predictions meanwhile
        opened = fold(cast("list[AnyEvent]", [
            cls(run_id=runner.run_id, seq=seq, at=0.0, **fields)
            for seq, (cls, fields) in enumerate(opening, start=1)]))
    runner.launch_opening(opened)


def _recording(base: BaseRun) -> Recording:
    ancestors = [link.state for link in base.lineage.links[:-1] if link.state is not None]
    recording = Recording.of(base.state, lineage=ancestors, load_run=base.load_run)
    recording.logs = (base.events, *(link.events for link in reversed(base.lineage.links[:-1])))
    return recording


_COMPLETES = frozenset({"node.completed", "node.reused"})


def run_plan(
    plan: ForkPlan, *, run_id: str | None = None, label: str = "",
    fork_group_id: str | None = None, ignore_budget: bool = False,
    hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None = None,
    shared_memo: SharedMemo | None = None, on_event: Callable[[Event], None] | None = None,
    cancel: CancelToken | None = None, store: Store | None = None,
    base_trace_id: str | None = None,
) -> Runner:
    """Execute a prepared fork; returns the runner (its ``state`` is the variant's)."""
    import logging

    base = plan.base
    env = base.env
    oracle = ForkOracle(
        LiveOracle(env), recording=_recording(base), changes=plan.active,
        targets=config_targets(plan.changes), policy=plan.policy,
        spend=Spend(plan.budget, enforce=not ignore_budget), prices=env.prices,
        memoize=plan.memoize, shared_memo=shared_memo, hitl=hitl,
        routes_used=plan.routes_used, graph=plan.graph, point=plan.effective)

    def observe(event: Event) -> None:
        if (shared_memo is not None and event.type in _COMPLETES
                and event.run_id == runner.run_id):
            # events arrive once stored, in batches: the state may be nodes ahead by now
            shared_memo.add(next(ex for ex in reversed(runner.state.executions)
                                 if ex.end_seq == event.seq))
        if on_event is not None:
            on_event(event)

    make = Runner if plan.one_call is None else one_call_runner(base, plan.one_call,
                                                                 plan.changes)
    runner = make(plan.graph, store=store or base.store, run_id=run_id or env.ids(), env=env,
                  oracle=oracle, cancel=cancel, on_event=observe,
                  graph_version=base.state.graph_version)
    logging.getLogger("forklab.engine.fork").info("replay.fork.fork_started", extra={
        "base_run_id": base.run_id, "fork_run_id": runner.run_id,
        "fork_sequence_id": plan.point.seq, "fork_node_id": plan.point.node})
    attributes: dict[str, str | int] = {
        "fork.run_id": runner.run_id, "fork.base_run_id": base.run_id,
        "fork.sequence_id": plan.point.seq, "fork.node_id": plan.point.node or "",
        "fork.changes": canonical_json([c.wire() for c in plan.changes]),
        "fork.base_trace_id": base_trace_id or "",
    }
    with tracer.start_as_current_span("replay.fork", attributes=attributes):
        launch_before_opening(runner, plan, label=label, fork_group_id=fork_group_id,
                              ignore_budget=ignore_budget)
        try:
            begin_variant(runner, plan, label=label, fork_group_id=fork_group_id,
                          ignore_budget=ignore_budget)
        except BaseException:
            runner.drop_launched()
            raise
        runner.resume_loop()
    return runner


def _child_run_id(state: RunState, seq: int) -> str | None:
    for ex in state.all_executions():
        for action in ex.actions:
            if action.seq == seq and isinstance(action, ChildOutcome):
                return action.child_run_id
    return None


def tail_spend(state: RunState, store: Store, *, start: int | None = None) -> Spend:
    """What a run's tail has spent: every live or changed call, a subgraph's counted call
    by call from its child run (so a resumed fork keeps one budget)."""
    spend = Spend(Budget(max_live_calls=None, max_cost_usd=None), enforce=False)
    first = state.tail_from_call if start is None else start
    for call in state.calls[first:]:
        if call.label not in ("live", "changed"):
            continue
        if call.kind != "subgraph":
            spend.after(call.cost_usd)
            continue
        child_id = _child_run_id(state, call.seq)
        events = store.read(child_id) if child_id else []
        if events:
            child = tail_spend(fold(events), store, start=0)
            spend.live_calls += child.live_calls
            spend.incurred_usd += child.incurred_usd
            spend.unpriced_calls += child.unpriced_calls
    return spend


def fork_runner(
    run_id: str, *, store: Store, env: Environment | None = None,
    hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None = None,
    on_event: Callable[[Event], None] | None = None, cancel: CancelToken | None = None,
) -> Runner:
    """Rebuild the runner of an existing fork from its log (to answer a gate or resume).

    The oracle is configured exactly as when the fork started — changes, policy, budget and
    memoization come from its ``run.forked`` event — and its budget counters resume from the
    calls the tail already made (its subgraphs' included).
    """
    events = store.read(run_id)
    forked = forked_event(events)
    if forked is None:
        raise RunNotFound(f"run {run_id!r} is not a fork", run_id=run_id)
    env = env or Environment()
    base = load_base(forked.base_run_id, store=store, env=env)
    state = fold(events)
    changes = parse_changes(forked.changes) if forked.changes else []
    spend = Spend(Budget.parse(forked.budget), enforce=not forked.ignore_budget)
    done = tail_spend(state, store)
    spend.live_calls, spend.incurred_usd = done.live_calls, done.incurred_usd
    spend.unpriced_calls = done.unpriced_calls
    used = set(forked.routes_used)
    own = state.executions[state.prefix_executions:]
    used |= {ex.node for ex in own for a in ex.actions
             if isinstance(a, RouteTaken) and a.label == "simulated"}
    oracle = ForkOracle(
        LiveOracle(env), recording=_recording(base), changes=changes,
        targets=config_targets(changes[forked.inherited_changes:]),
        policy=Policy.parse(forked.policy), spend=spend, prices=env.prices,
        memoize=forked.memoize, hitl=hitl, routes_used=sorted(used),
        point=_recorded_point(forked))
    make = Runner if forked.one_call is None else one_call_runner(
        base, forked.one_call, changes[forked.inherited_changes:])
    runner = make(parse_stored_graph(forked.graph), store=store, run_id=run_id, env=env,
                  oracle=oracle, cancel=cancel, on_event=on_event,
                  graph_version=state.graph_version)
    runner.state = state
    return runner


def _recorded_point(forked: RunForked) -> ForkPoint | None:
    """The call-level point whose prefix calls a fork's tail serves (``run.forked``'s
    ``prefix_call``), when it has one: a fork continued from its log serves them too."""
    point = forked.point
    call = forked.prefix_call
    if call is None:  # a node point, or a call point an input patch moved to its node
        return None
    return ForkPoint(seq=int(point["seq"]), node=point.get("node"),
                     occurrence=point.get("occurrence"), iteration=point.get("iteration"),
                     kind="before_call", run_id=point.get("run_id"), call=call)
