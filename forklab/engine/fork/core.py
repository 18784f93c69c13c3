"""``fork()``: replay a recorded run to a point, apply changes, run the tail, compare.

Preparation (:func:`prepare_fork`) is pure and makes no calls: it loads the base and its
lineage, resolves the point in the base's logical run, validates the changes, finds the
effective point (:mod:`~forklab.engine.fork.effective`), rebuilds the prefix state by folding
the log that holds it, and estimates the tail. Preflight, dry runs and sweep estimates stop
there. Execution (:mod:`~forklab.engine.fork.variant`) appends the variant's log and runs the
tail through the ordinary runner and planner with a fork oracle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from forklab.engine.actions import RouteTaken
from forklab.engine.captured import check_prefix_servable
from forklab.engine.collector import collector_paused
from forklab.engine.environment import Environment
from forklab.engine.errors import (
    ForkPointNotFound,
    InvalidChange,
    LiveBudgetExceeded,
    PointCompacted,
    SourceMissing,
    UnpricedModel,
)
from forklab.engine.fork.apply import (
    check_inherited_answer,
    check_tool_changes,
    config_targets,
    effective_graph,
)
from forklab.engine.fork.base import BaseRun, load_base
from forklab.engine.fork.changes import Change, RouteChange, parse_changes, wire
from forklab.engine.fork.effective import apply_at
from forklab.engine.fork.estimate import estimate_tail
from forklab.engine.fork.onecall import imported_kind, plan_one_call
from forklab.engine.fork.plan import ForkPlan, PlanInputs
from forklab.engine.fork.points import ForkPoint
from forklab.engine.fork.resolve import (
    call_point,
    check_point,
    earliest_context,
    parse_point,
    point_number,
    resolve_point,
)
from forklab.engine.fork.tail import Policy
from forklab.engine.fork.variant import begin_variant, fork_runner, run_plan
from forklab.engine.fork.wire import Budget
from forklab.engine.recording import RecordedRun
from forklab.engine.reducers import fold, fold_to, rewind_to_boundary
from forklab.engine.state import Execution, RunState
from forklab.engine.store import Store

log = logging.getLogger("forklab.engine.fork")


def prefix_at(base: BaseRun, point: ForkPoint) -> RunState:
    """The state at ``point``: the log holding it, folded up to its seq."""
    return prefix_folder(base, point)()


def prefix_folder(base: BaseRun, point: ForkPoint) -> Callable[[], RunState]:
    """How to fold the state at ``point``, checked now (``fork_point_not_found`` behind a
    compaction boundary) and folded only when called."""
    link = base.link(point.run_id)
    events = link.events
    first = events[0].seq if events else 0
    if first == 1:
        return lambda: fold_to(events, point.seq, link.waypoints)
    usable = [v for v in base.store.snapshot_versions(link.run_id) if v <= point.seq]
    if not usable or usable[-1] < first - 1:
        raise PointCompacted(
            f"seq {point.seq} is behind the compaction boundary of run {link.run_id!r}; the "
            f"earliest forkable point is {base.index.earliest_text()} (or fork a snapshot with "
            "source='snapshot', at={'version': N})", point=point,
            **earliest_context(base.index))
    return lambda: _fold_from_snapshot(base, link.run_id, usable[-1], events, point)


class SharedPrefixes:
    """Prefix states shared by the plans of one sweep: every variant forking the same base
    at the same effective point reads one fold of its prefix instead of folding its own.

    A shared state is read-only (``begin_variant`` serialises it, the planner reads its
    executions; nothing mutates it), so the variants' threads may read it together; a
    fold runs once per ``(run, seq)``, under a lock.
    """

    def __init__(self) -> None:
        self._states: dict[tuple[str, int], RunState] = {}
        self._lock = threading.Lock()
        self.folds = 0  # how many prefixes were folded (what sharing saves is visible)

    def folder(self, base: BaseRun, point: ForkPoint) -> Callable[[], RunState]:
        """Like :func:`prefix_folder` (checked now, folded when first called), shared."""
        fold_prefix = prefix_folder(base, point)
        key = (base.link(point.run_id).run_id, point.seq)

        def shared() -> RunState:
            with self._lock:
                state = self._states.get(key)
                if state is None:
                    state = self._states[key] = fold_prefix()
                    self.folds += 1
                return state

        return shared


def _folder(base: BaseRun, point: ForkPoint,
            prefixes: SharedPrefixes | None) -> Callable[[], RunState]:
    return prefix_folder(base, point) if prefixes is None else prefixes.folder(base, point)


def _fold_from_snapshot(base: BaseRun, run_id: str, version: int, events: Sequence[Any],
                        point: ForkPoint) -> RunState:
    snapshot = base.store.load_snapshot(run_id, version)
    assert snapshot is not None
    return fold([e for e in events if snapshot.version < e.seq <= point.seq], snapshot)


def _snapshot_point(base: BaseRun, version: int) -> tuple[ForkPoint, RunState]:
    versions = base.store.snapshot_versions(base.run_id)
    state = base.store.load_snapshot(base.run_id, version) if version in versions else None
    if state is None:
        raise ForkPointNotFound(f"run {base.run_id!r} has no snapshot at version {version}; "
                                f"snapshots: {versions or 'none'}", snapshots=versions)
    rewind_to_boundary(state)
    node = state.frontier[0] if state.frontier else None
    occurrence = state.occurrences.get(node, 0) + 1 if node else None
    return ForkPoint(seq=version, node=node, occurrence=occurrence, iteration=state.iteration,
                     run_id=base.run_id, position=len(state.executions)), state


def _requested_point(base: BaseRun, at: Any, source: str,
                     where: Callable[[RunState], bool] | None,
                     ) -> tuple[ForkPoint, RunState | None, str]:
    if isinstance(at, str) and at not in ("start", "failure"):
        at = parse_point(at)  # the CLI form, so "version:N" reaches the snapshot branch
    check_point(at)
    if (isinstance(at, dict) and "version" in at) or source == "snapshot":
        if not (isinstance(at, dict) and "version" in at):
            raise ForkPointNotFound("source 'snapshot' forks a snapshot: pass at={'version': N}")
        point, prefix = _snapshot_point(base, point_number(at, "version"))
        return point, prefix, "snapshot"
    if not base.events:
        raise SourceMissing(
            f"run {base.run_id!r} was archived: its events are gone, so only a snapshot can be "
            f"forked (snapshots: {base.store.snapshot_versions(base.run_id) or 'none'}; "
            "at={'version': N})", run_id=base.run_id)
    if where is not None:
        return _where_point(base, where), None, source
    try:
        return resolve_point(base.index, at, status=base.state.status), None, source
    except PointCompacted as behind:
        covering = _covering_snapshot(base, behind.point) if source == "auto" else None
        if covering is None:
            raise
        return (*covering, "snapshot")


def _covering_snapshot(base: BaseRun, point: ForkPoint) -> tuple[ForkPoint, RunState] | None:
    """A snapshot of the base's own log that forks exactly ``point`` (behind the compaction
    boundary): taken at that boundary, or inside the node that starts there (rewound to
    it). ``source="auto"`` falls back to it; None when no snapshot covers the point."""
    if point.run_id not in (None, base.run_id):
        return None
    for version in base.store.snapshot_versions(base.run_id):
        if version < point.seq:
            continue
        found, state = _snapshot_point(base, version)
        if found.position == point.position and found.node == point.node:
            return found, state
        if (found.position or 0) > (point.position or 0):
            return None  # later snapshots rewind to later boundaries still
    return None


@dataclass(frozen=True)
class Resolved:
    """A fork request's point resolved in its base (the part a sweep's variants share):
    the point, the snapshot state when the point is a snapshot, and the source used."""

    point: ForkPoint
    snapshot_prefix: RunState | None
    source: str


def resolve_request(base: BaseRun, *, at: Any = None, source: str = "events",
                    where: Callable[[RunState], bool] | None = None) -> Resolved:
    """Resolve ``at`` (or ``where``) in the base's logical run; raises the fork point
    errors (``fork_point_not_found`` …, ``source_missing``). No change is looked at."""
    return Resolved(*_requested_point(base, at, source, where))


def first_call_point(base: BaseRun, change: Any) -> dict[str, Any] | None:
    """With no ``at``, a fork whose changes address calls forks right before the first of
    them in the base's log (SPEC §6.2); None when no change addresses a call."""
    addressed = [str(address) for item in parse_changes(change)
                 if (address := item.call_address()) is not None]
    if not addressed:
        return None
    points = base.index.points()
    order = {p.call: i for i, p in enumerate(points) if p.call is not None}
    nodes = {(p.node, p.occurrence): i for i, p in enumerate(points) if p.call is None}

    def rank(key: str) -> int:
        point = call_point(base.index, key)  # raises for a call the base never made
        if point.call is not None:
            return order.get(point.call, len(points))
        return nodes.get((point.node, point.occurrence), len(points))

    return {"before_call": min(addressed, key=rank)}


def _refuse_calls_before(base: BaseRun, point: ForkPoint, changes: Sequence[Change]) -> None:
    """A per-call change must address a call at or after the point: the calls before it are
    the fork's past, served as recorded, so a reply, result, rerun or setting there would
    either be ignored or alter a past the later served calls did not see. Refused
    (``invalid_change``) rather than applied silently, naming the point to use instead."""
    points = base.index.points()
    rank = {(p.seq, p.call): i for i, p in enumerate(points)}
    here = rank.get((point.seq, point.call))
    if here is None:  # a boundary the index does not list (a snapshot's): nothing to say
        return
    for item in changes:
        address = item.call_address()
        if address is None:
            continue
        try:
            at = call_point(base.index, str(address))
        except ForkPointNotFound:  # a call the base never made: the tail may make it
            continue
        there = rank.get((at.seq, at.call))
        if there is not None and there < here:
            raise InvalidChange(
                f"{item.describe()}: call {str(address)!r} comes before the fork point "
                f"({point.label}), where every call is served as recorded; fork at or "
                f"before it (leave out 'at' to fork right before that call: "
                f"{{\"before_call\": \"{address}\"}})",
                kind=item.kind, call=str(address), point=point.address())


def prepare_fork(
    base: str | RecordedRun | BaseRun, *, at: Any = None,
    change: Change | dict[str, Any] | Sequence[Any] | Callable[[ForkPoint], Any] | None = None,
    policy: Policy | dict[str, Any] | None = None, budget: Budget | dict[str, Any] | None = None,
    ignore_budget: bool = False, source: str = "events", store: Store | None = None,
    env: Environment | None = None, graph_version: int | None = None,
    where: Callable[[RunState], bool] | None = None,
) -> ForkPlan:
    """Resolve and validate a fork without running anything (no model or tool calls).

    A bounded pass that builds what the fork keeps (the base, its index, the effective
    graph), so the cyclic collector is paused across all of it — one pause instead of a
    pause for the base and collections over the freshly built base while planning (see
    :func:`~forklab.engine.collector.collector_paused`)."""
    with collector_paused():
        base = base if isinstance(base, BaseRun) else load_base(base, store=store, env=env)
        if imported_kind(base) == "one_call":
            return plan_imported(base, at=at, change=change, policy=policy, budget=budget,
                                 ignore_budget=ignore_budget)
        if at is None and where is None and change is not None and not callable(change):
            at = first_call_point(base, change)
        return plan_at(base, resolve_request(base, at=at, source=source, where=where),
                       change=change, policy=policy, budget=budget,
                       ignore_budget=ignore_budget, graph_version=graph_version)


def plan_imported(
    base: BaseRun, *, at: Any, change: Any, policy: Policy | dict[str, Any] | None = None,
    budget: Budget | dict[str, Any] | None = None, ignore_budget: bool = False,
    prefixes: SharedPrefixes | None = None,
) -> ForkPlan:
    """The plan of a fork of a run imported from a trace: a one-call fork
    (:mod:`~forklab.engine.fork.onecall`), budget-checked like every plan."""
    plan = plan_one_call(base, at=at, change=change, policy=Policy.parse(policy),
                         budget=Budget.parse(budget),
                         fold=lambda point: _folder(base, point, prefixes))
    _check_budget(plan, ignore_budget)
    return plan


def plan_at(
    base: BaseRun, resolved: Resolved, *,
    change: Change | dict[str, Any] | Sequence[Any] | Callable[[ForkPoint], Any] | None = None,
    policy: Policy | dict[str, Any] | None = None, budget: Budget | dict[str, Any] | None = None,
    ignore_budget: bool = False, graph_version: int | None = None,
    prefixes: SharedPrefixes | None = None,
) -> ForkPlan:
    """The plan of one change set at an already resolved point (:func:`resolve_request`):
    validate the changes, find the effective point, estimate; the prefix is folded lazily
    (once per effective point across the plans sharing ``prefixes``)."""
    policy, budget = Policy.parse(policy), Budget.parse(budget)
    point, source = resolved.point, resolved.source
    raw = change(point) if callable(change) else change
    changes = parse_changes([] if raw is None else raw)
    graph = base.graph
    if graph_version is not None:
        from forklab.engine.fork.lifecycle import rebase_graph

        graph = rebase_graph(base, graph_version, point)
    graph = effective_graph(graph, changes)
    check_tool_changes(graph, changes, base.env.tools)
    _refuse_calls_before(base, point, changes)
    if base.state.changes:
        check_inherited_answer(graph, parse_changes(base.state.changes), changes)
    application = apply_at(base, point, changes)
    effective = application.point
    if effective.call is not None and effective.node is not None:
        check_prefix_servable(base.link(effective.run_id).events, node=effective.node,
                              occurrence=effective.occurrence or 1, before=effective.call)
    prefix_ref: dict[str, Any] = {}
    prefix: RunState | Callable[[], RunState] | None = resolved.snapshot_prefix
    if prefix is None or application.moved:
        prefix = _folder(base, effective, prefixes)
        prefix_ref = {"run_id": base.link(effective.run_id).run_id, "seq": effective.seq}
    memoize = policy.memoize or application.moved
    estimate = estimate_tail(
        graph=graph, base=base, position=effective.position or 0, changes=changes,
        applied=application.applied,
        active=parse_changes([*base.state.changes, *wire(changes)]),
        dirty=application.written_inputs, policy=policy, memoize=memoize,
        prices=base.env.prices, call=effective.call)
    estimate.events_reused = effective.seq
    plan = ForkPlan(base=base, point=point, effective=effective, changes=changes, graph=graph,
                    prefix=prefix, new_input=application.new_input,
                    changed_inputs=application.written_inputs, policy=policy, budget=budget,
                    memoize=memoize, estimate=estimate, application=application,
                    warnings=list(estimate.warnings), source=source, prefix_ref=prefix_ref)
    plan.warnings += application.warnings()
    plan.warnings += _unreached_targets(changes, base.state.executions[effective.position or 0:])
    plan.routes_used = _routes_used(plan)
    _check_budget(plan, ignore_budget)
    return plan


def plan_from_inputs(
    base: BaseRun, inputs: PlanInputs | dict[str, Any], *,
    policy: Policy | dict[str, Any] | None = None,
    budget: Budget | dict[str, Any] | None = None, graph_version: int | None = None,
    prefixes: SharedPrefixes | None = None,
) -> ForkPlan:
    """The plan :func:`prepare_fork` made, rebuilt from its :meth:`ForkPlan.inputs` (or
    their JSON form); a sweep's plans pass one ``prefixes``: one fold per effective point.

    Nothing is resolved, validated or estimated again: the effective point is taken as
    given (applying the changes there finds no reader, as it did when the point was
    resolved), and the estimate, warnings and routes are the stored ones. What is rebuilt
    is what the tail needs and the inputs cannot carry cheaply: the effective graph, the
    application at the point and the prefix state.
    """
    given = inputs if isinstance(inputs, PlanInputs) else PlanInputs.model_validate(inputs)
    policy, budget = Policy.parse(policy), Budget.parse(budget)
    if given.one_call is not None:  # checked again against the base as it is now
        plan = plan_one_call(base, at={"before_call": given.one_call},
                             change=list(given.changes), policy=policy, budget=budget,
                             fold=lambda point: _folder(base, point, prefixes))
        plan.estimate = given.estimate.estimate()
        return plan
    point, effective = given.point.point(), given.effective.point()
    changes = list(given.changes)
    graph = base.graph
    if graph_version is not None:
        from forklab.engine.fork.lifecycle import rebase_graph

        graph = rebase_graph(base, graph_version, point)
    graph = effective_graph(graph, changes)
    application = replace(apply_at(base, effective, changes), requested=point)
    prefix_ref: dict[str, Any] = {}
    prefix: RunState | Callable[[], RunState]
    if given.source == "snapshot" and not given.moved:
        prefix = _snapshot_point(base, point.seq)[1]
    else:
        prefix = _folder(base, effective, prefixes)
        prefix_ref = {"run_id": base.link(effective.run_id).run_id, "seq": effective.seq}
    return ForkPlan(base=base, point=point, effective=effective, changes=changes, graph=graph,
                    prefix=prefix, new_input=application.new_input,
                    changed_inputs=application.written_inputs, policy=policy, budget=budget,
                    memoize=given.memoize, estimate=given.estimate.estimate(),
                    application=application, warnings=list(given.warnings),
                    source=given.source, routes_used=list(given.routes_used),
                    prefix_ref=prefix_ref, point_notes=list(given.point_notes))


def _unreached_targets(changes: Sequence[Change], tail: Sequence[Execution]) -> list[str]:
    """Warn about node-scoped changes whose node the base never ran after the fork point."""
    ran = {e.node for e in tail}
    warnings = []
    for item in changes:
        node = item.scoped_node()
        if node is not None and node not in ran:
            warnings.append(
                f"{item.describe()}: {node!r} does not run after the fork point "
                "in the base run; the change matters only if the tail reaches it")
    return warnings


def _routes_used(plan: ForkPlan) -> list[str]:
    """Routers whose once-only route change (inherited, still active) already fired before
    the point: a forced decision after the run that made the change started its own part."""
    fresh = {c.source for c in plan.application.applied if isinstance(c, RouteChange)}
    holder = plan.effective.run_id or plan.base.run_id
    used = []
    for link in plan.base.lineage.links[:plan.base.lineage.index_of(holder) + 1]:
        for item in link.own_changes():
            if not isinstance(item, RouteChange) or not item.once or item.source in fresh:
                continue
            for ex in plan.prefix_state.executions[link.own_start:]:
                if ex.node == item.source and any(
                        isinstance(a, RouteTaken) and a.label == "simulated"
                        for a in ex.actions):
                    used.append(item.source)
    return sorted(set(used))


def _where_point(base: BaseRun, predicate: Callable[[RunState], bool]) -> ForkPoint:
    states: dict[str, tuple[RunState, Any]] = {}
    for point in base.index.points():
        link = base.link(point.run_id)
        state, events = states.setdefault(link.run_id, (RunState(), iter(link.events)))
        while state.version < point.seq:
            fold([next(events)], state)
        if predicate(state):
            return point
    raise ForkPointNotFound("no boundary of the run satisfies the where= predicate")


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


def plan_targets(plan: ForkPlan) -> list[Any]:
    """What this request's config-type changes target (their calls are ``changed``)."""
    return config_targets(plan.changes)


__all__ = ["BaseRun", "ForkPlan", "Resolved", "SharedPrefixes", "begin_variant", "fork_runner",
           "load_base", "plan_at", "plan_from_inputs", "plan_imported", "prefix_at", "prepare_fork",
           "resolve_request", "run_plan"]
