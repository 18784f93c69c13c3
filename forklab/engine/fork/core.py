"""``fork()``: replay a recorded run to a point, apply changes, run the tail, compare.

Preparation (:func:`prepare_fork`) is pure and makes no calls: it loads the base, resolves
the point, validates the changes, rebuilds the prefix state by folding, and estimates the
tail. Preflight, dry runs and sweep estimates stop there. Execution appends the variant's
log — ``run.started`` (kind ``counterfactual``), ``run.forked`` (the prefix state, the
effective graph), one ``change.applied`` per change, memory writes — and then runs the tail
through the ordinary runner and planner with a :class:`ForkOracle`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.canonical import canonical_json, merge_patch
from forklab.engine.environment import Environment
from forklab.engine.errors import (
    ForkPointNotFound,
    LiveBudgetExceeded,
    RunInProgress,
    RunNotFound,
    SourceMissing,
    UnpricedModel,
    VersionSkewError,
)
from forklab.engine.events import (
    REPLAY_VERSION,
    AnyEvent,
    ChangeApplied,
    Event,
    MemoryWritten,
    RunForked,
    RunStarted,
)
from forklab.engine.fork.apply import effective_graph
from forklab.engine.fork.changes import Change, InputPatchChange, MemoryChange, parse_changes, wire
from forklab.engine.fork.estimate import Estimate, changed_input_keys, estimate_tail
from forklab.engine.fork.points import (
    ForkPoint,
    RunIndex,
    parse_point,
    point_number,
    resolve_point,
)
from forklab.engine.fork.tail import Budget, ForkOracle, Policy, Recording, SharedMemo
from forklab.engine.graph import GraphSpec, parse_graph
from forklab.engine.oracle import HumanAnswer, LiveOracle
from forklab.engine.recording import RecordedRun
from forklab.engine.reducers import fold, rewind_to_boundary
from forklab.engine.runner import CancelToken, Runner
from forklab.engine.state import Execution, RunState
from forklab.engine.store import Store, graph_hash
from forklab.engine.telemetry import tracer

log = logging.getLogger("forklab.engine.fork")


@dataclass
class BaseRun:
    """The run being forked, loaded once."""

    run_id: str
    store: Store
    env: Environment
    events: list[AnyEvent]
    state: RunState
    graph: GraphSpec
    index: RunIndex

    def own_executions(self) -> list[Execution]:
        """Executions recorded in this run's own log (not inherited from its base)."""
        skip = (self.state.fork or {}).get("prefix_executions", 0)
        return self.state.executions[skip:]


def _final_state(run_id: str, store: Store, events: list[AnyEvent]) -> RunState:
    if events and events[0].seq == 1:
        return fold(events)
    snapshot = store.load_snapshot(run_id)
    if snapshot is None:
        raise SourceMissing(
            f"run {run_id!r} has lost its events (archived or compacted) and has no snapshot; "
            "it cannot be forked — save runs you care about as cases", run_id=run_id)
    return fold([e for e in events if e.seq > snapshot.version], snapshot)


def _graph_of(state: RunState, events: Sequence[AnyEvent], store: Store) -> GraphSpec:
    for event in events[:3]:
        if isinstance(event, RunForked):
            return parse_graph(event.graph)
    return store.load_graph(state.graph_id, state.graph_version)


def load_base(base: str | RecordedRun, *, store: Store | None,
              env: Environment | None) -> BaseRun:
    """Load a finished, forkable run (refusing unfinished, archived and skewed ones)."""
    if isinstance(base, RecordedRun):
        run_id, store, env = base.run_id, store or base.store, env or base.env
    else:
        run_id = base
    if store is None:
        raise RunNotFound("fork(base=<run id>) needs the store holding the run; pass store=")
    env = env or Environment()
    events = store.read(run_id)
    if not events and not store.snapshot_versions(run_id):
        if store.last_seq(run_id):
            raise SourceMissing(f"run {run_id!r} was archived and its events are gone; it "
                                "cannot be forked", run_id=run_id)
        raise RunNotFound(f"no run {run_id!r}", run_id=run_id)
    state = _final_state(run_id, store, events)
    if not state.finished:
        raise RunInProgress(
            f"run {run_id!r} is {state.status}; only a finished run can be forked — wait for "
            "it, answer it, or cancel it first", run_id=run_id, status=state.status)
    if state.replay_version != REPLAY_VERSION:
        raise VersionSkewError(
            f"run {run_id!r} was recorded under replay version {state.replay_version}; this "
            f"engine replays version {REPLAY_VERSION} and will not approximate it",
            run_id=run_id, recorded=state.replay_version, current=REPLAY_VERSION)
    return BaseRun(run_id=run_id, store=store, env=env, events=events, state=state,
                   graph=_graph_of(state, events, store), index=RunIndex.build(events))


@dataclass
class ForkPlan:
    """Everything decided before the tail runs (what preflight reports)."""

    base: BaseRun
    point: ForkPoint
    effective: ForkPoint
    changes: list[Change]
    graph: GraphSpec
    prefix_state: RunState
    new_input: dict[str, Any]
    changed_inputs: set[str]
    policy: Policy
    budget: Budget
    memoize: bool
    estimate: Estimate
    warnings: list[str] = field(default_factory=list)
    source: str = "events"

    def preflight(self) -> dict[str, Any]:
        """The body of ``POST /forks/preflight/``."""
        return {
            "fork_sequence_id": self.point.seq, "fork_node_id": self.point.node,
            "effective_fork_sequence_id": self.effective.seq,
            "events_reused": self.estimate.events_reused,
            "estimate": self.estimate.wire(), "warnings": self.warnings,
            "point": self.point.to_wire(), "changes": wire(self.changes),
        }


def _prefix_from_events(base: BaseRun, boundary: int) -> RunState:
    first = base.events[0].seq if base.events else 0
    if first == 1:
        return fold(base.events[:boundary])
    usable = [v for v in base.store.snapshot_versions(base.run_id) if v <= boundary]
    if not usable or usable[-1] < first - 1:
        raise ForkPointNotFound(
            f"seq {boundary} is behind the compaction boundary of run {base.run_id!r}; the "
            f"earliest forkable point is seq {first - 1} (or fork a snapshot with "
            "source='snapshot', at={'version': N})", earliest_forkable=first - 1)
    snapshot = base.store.load_snapshot(base.run_id, usable[-1])
    assert snapshot is not None
    return fold([e for e in base.events if snapshot.version < e.seq <= boundary], snapshot)


def _snapshot_point(base: BaseRun, version: int) -> tuple[ForkPoint, RunState]:
    versions = base.store.snapshot_versions(base.run_id)
    state = base.store.load_snapshot(base.run_id, version) if version in versions else None
    if state is None:
        raise ForkPointNotFound(f"run {base.run_id!r} has no snapshot at version {version}; "
                                f"snapshots: {versions or 'none'}", snapshots=versions)
    rewind_to_boundary(state)
    node = state.frontier[0] if state.frontier else None
    occurrence = state.occurrences.get(node, 0) + 1 if node else None
    return ForkPoint(seq=version, node=node, occurrence=occurrence,
                     iteration=state.iteration), state


def prepare_fork(
    base: str | RecordedRun | BaseRun, *, at: Any = None,
    change: Change | dict[str, Any] | Sequence[Any] | Callable[[ForkPoint], Any] | None = None,
    policy: Policy | dict[str, Any] | None = None, budget: Budget | dict[str, Any] | None = None,
    ignore_budget: bool = False, source: str = "events", store: Store | None = None,
    env: Environment | None = None, graph_version: int | None = None,
    where: Callable[[RunState], bool] | None = None,
) -> ForkPlan:
    """Resolve and validate a fork without running anything (no model or tool calls)."""
    base = base if isinstance(base, BaseRun) else load_base(base, store=store, env=env)
    policy, budget = Policy.parse(policy), Budget.parse(budget)
    if isinstance(at, str) and at not in ("start", "failure"):
        at = parse_point(at)  # the CLI form, so "version:N" reaches the snapshot branch
    if (isinstance(at, dict) and "version" in at) or source == "snapshot":
        if not (isinstance(at, dict) and "version" in at):
            raise ForkPointNotFound("source 'snapshot' forks a snapshot: pass at={'version': N}")
        point, prefix = _snapshot_point(base, point_number(at, "version"))
        source = "snapshot"
    else:
        point = _where_point(base, where) if where else resolve_point(
            base.index, at, status=base.state.status)
        prefix = None
    raw = change(point) if callable(change) else change
    changes = parse_changes([] if raw is None else raw)
    graph = base.graph
    if graph_version is not None:
        from forklab.engine.fork.lifecycle import rebase_graph

        graph = rebase_graph(base, graph_version, point)
    graph = effective_graph(graph, changes)
    effective, new_input, changed = _input_patch(base, point, changes)
    if prefix is None or effective is not point:
        prefix = _prefix_from_events(base, effective.seq)
    memoize = policy.memoize or effective is not point
    tail = [e for e in base.own_executions() if e.start_seq > effective.seq]
    if source == "snapshot":
        tail = base.state.executions[len(prefix.executions):]
    estimate = estimate_tail(graph=graph, tail=tail, changes=changes, changed_inputs=changed,
                             memoize=memoize, prices=base.env.prices)
    estimate.events_reused = effective.seq
    plan = ForkPlan(base=base, point=point, effective=effective, changes=changes, graph=graph,
                    prefix_state=prefix, new_input=new_input, changed_inputs=changed,
                    policy=policy, budget=budget, memoize=memoize, estimate=estimate,
                    warnings=list(estimate.warnings), source=source)
    if effective is not point:
        plan.warnings.append(f"the input patch changes {sorted(changed)}, which a node before "
                             "the fork point read: the fork starts from the beginning and "
                             "unchanged calls reuse their recordings")
    plan.warnings += _unreached_targets(changes, tail)
    _check_budget(plan, ignore_budget)
    return plan


def _unreached_targets(changes: Sequence[Change], tail: Sequence[Execution]) -> list[str]:
    """Warn about node-scoped changes whose node the base never ran after the fork point."""
    ran = {e.node for e in tail}
    warnings = []
    for item in changes:
        node = (getattr(item, "target", None) or getattr(item, "node", None)
                or getattr(item, "source", None))
        if node is not None and node.split(".")[0] not in ran:
            warnings.append(
                f"{item.describe()}: {node.split('.')[0]!r} does not run after the fork point "
                "in the base run; the change matters only if the tail reaches it")
    return warnings


def _where_point(base: BaseRun, predicate: Callable[[RunState], bool]) -> ForkPoint:
    state = RunState()
    events = iter(base.events)
    for point in base.index.points():
        while state.version < point.seq:
            fold([next(events)], state)
        if predicate(state):
            return point
    raise ForkPointNotFound("no boundary of the run satisfies the where= predicate")


def _input_patch(base: BaseRun, point: ForkPoint,
                 changes: Sequence[Change]) -> tuple[ForkPoint, dict[str, Any], set[str]]:
    patch = next((c for c in changes if isinstance(c, InputPatchChange)), None)
    if patch is None:
        return point, dict(base.state.input), set()
    new_input = merge_patch(base.state.input, patch.patch)
    changed = changed_input_keys(base.state.input, new_input)
    read_before = any(set(e.reads) & changed for e in base.own_executions()
                      if e.start_seq <= point.seq)
    if not read_before:
        return point, new_input, changed
    return resolve_point(base.index, "start", status=base.state.status), new_input, changed


def _check_budget(plan: ForkPlan, ignore_budget: bool) -> None:
    est, budget = plan.estimate, plan.budget
    if budget.max_cost_usd is not None and est.unpriced_models:
        raise UnpricedModel(
            f"model(s) {', '.join(est.unpriced_models)} have no price while a cost budget of "
            f"${budget.max_cost_usd} is set; choose a priced model, add a price "
            "(FORKLAB_PRICES), or clear max_cost_usd (admin)",
            models=est.unpriced_models)
    if ignore_budget:
        return
    if budget.max_live_calls is not None and est.live_calls > budget.max_live_calls:
        raise LiveBudgetExceeded(
            f"the tail is estimated at {est.live_calls} live calls; the budget is "
            f"{budget.max_live_calls}. Narrow the change, raise max_live_calls (admin) or pass "
            "ignore_budget", estimate=est.wire())
    if budget.max_cost_usd is not None and est.cost_usd > budget.max_cost_usd:
        raise LiveBudgetExceeded(
            f"the tail is estimated at ${est.cost_usd:.4f}; the budget is "
            f"${budget.max_cost_usd:.4f}. Narrow the change, raise max_cost_usd (admin) or pass "
            "ignore_budget", estimate=est.wire())


# -- execution ---------------------------------------------------------------------------------


def begin_variant(runner: Runner, plan: ForkPlan, *, label: str,
                  fork_group_id: str | None, ignore_budget: bool) -> None:
    """Append the variant's opening events: identity, prefix, changes, memory writes."""
    base = plan.base
    runner.emit(RunStarted, graph_id=base.state.graph_id,
                graph_version=base.state.graph_version, graph_hash=graph_hash(plan.graph),
                input=plan.new_input, start=plan.graph.start, run_kind="counterfactual",
                replay_version=REPLAY_VERSION, label=label, parent_run_id=base.run_id)
    runner.emit(RunForked, base_run_id=base.run_id, fork_sequence_id=plan.point.seq,
                fork_node_id=plan.effective.node, prefix_state=plan.prefix_state.to_wire(),
                changes=wire(plan.changes), graph=plan.graph.to_wire(),
                fork_group_id=fork_group_id, policy=plan.policy.wire(),
                budget=plan.budget.wire(), memoize=plan.memoize, ignore_budget=ignore_budget,
                estimate={**plan.estimate.wire(), "warnings": plan.warnings},
                point=plan.point.to_wire())
    for item in plan.changes:
        runner.emit(ChangeApplied, change=item.wire())
    for key in sorted(plan.changed_inputs):
        if key in plan.new_input:
            runner.emit(MemoryWritten, key=key, value=plan.new_input[key])
        else:
            runner.emit(MemoryWritten, key=key, value=None, deleted=True)
    for item in plan.changes:
        if isinstance(item, MemoryChange):
            for key in item.delete:
                runner.emit(MemoryWritten, key=key, value=None, deleted=True)
            for key, value in item.set.items():
                runner.emit(MemoryWritten, key=key, value=value)


def run_plan(
    plan: ForkPlan, *, run_id: str | None = None, label: str = "",
    fork_group_id: str | None = None, ignore_budget: bool = False,
    hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None = None,
    shared_memo: SharedMemo | None = None, on_event: Callable[[Event], None] | None = None,
    cancel: CancelToken | None = None, store: Store | None = None,
    base_trace_id: str | None = None,
) -> Runner:
    """Execute a prepared fork; returns the runner (its ``state`` is the variant's)."""
    base = plan.base
    env = base.env
    oracle = ForkOracle(
        LiveOracle(env), recording=Recording.of(base.state), changes=plan.changes,
        policy=plan.policy, budget=plan.budget, enforce_budget=not ignore_budget,
        prices=env.prices, memoize=plan.memoize, shared_memo=shared_memo, hitl=hitl)

    def observe(event: Event) -> None:
        if shared_memo is not None and event.type == "node.completed":
            shared_memo.add(runner.state.executions[-1])
        if on_event is not None:
            on_event(event)

    runner = Runner(plan.graph, store=store or base.store, run_id=run_id or env.ids(), env=env,
                    oracle=oracle, cancel=cancel, on_event=observe,
                    graph_version=base.state.graph_version)
    log.info("replay.fork.fork_started", extra={
        "base_run_id": base.run_id, "fork_run_id": runner.run_id,
        "fork_sequence_id": plan.point.seq, "fork_node_id": plan.point.node})
    attributes: dict[str, str | int] = {
        "fork.run_id": runner.run_id, "fork.base_run_id": base.run_id,
        "fork.sequence_id": plan.point.seq, "fork.node_id": plan.point.node or "",
        "fork.changes": canonical_json(wire(plan.changes)),
        "fork.base_trace_id": base_trace_id or "",
    }
    with tracer.start_as_current_span("replay.fork", attributes=attributes):
        begin_variant(runner, plan, label=label, fork_group_id=fork_group_id,
                      ignore_budget=ignore_budget)
        runner.resume_loop()
    return runner


def fork_runner(
    run_id: str, *, store: Store, env: Environment | None = None,
    hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None = None,
    on_event: Callable[[Event], None] | None = None, cancel: CancelToken | None = None,
) -> Runner:
    """Rebuild the runner of an existing fork from its log (to answer a gate or resume).

    The oracle is configured exactly as when the fork started — changes, policy, budget and
    memoization come from its ``run.forked`` event — and its budget counters resume from the
    calls the tail already made.
    """
    events = store.read(run_id)
    forked = next((e for e in events[:3] if isinstance(e, RunForked)), None)
    if forked is None:
        raise RunNotFound(f"run {run_id!r} is not a fork", run_id=run_id)
    env = env or Environment()
    base = load_base(forked.base_run_id, store=store, env=env)
    oracle = ForkOracle(
        LiveOracle(env), recording=Recording.of(base.state),
        changes=parse_changes(forked.changes), policy=Policy.parse(forked.policy),
        budget=Budget.parse(forked.budget), enforce_budget=not forked.ignore_budget,
        prices=env.prices, memoize=forked.memoize, hitl=hitl)
    state = fold(events)
    tail = state.calls[(state.fork or {}).get("tail_from_call", 0):]
    paid = [c for c in tail if c.label in ("live", "changed")]
    oracle.live_calls = len(paid)
    oracle.incurred_usd = sum(c.cost_usd or 0.0 for c in paid)
    runner = Runner(parse_graph(forked.graph), store=store, run_id=run_id, env=env,
                    oracle=oracle, cancel=cancel, on_event=on_event,
                    graph_version=state.graph_version)
    runner.state = state
    return runner
