"""``fork()`` and its result (SPEC §3.1)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from forklab.engine.collector import collector_paused
from forklab.engine.environment import Environment
from forklab.engine.events import AnyEvent, Event
from forklab.engine.fork.changes import Change, wire
from forklab.engine.fork.core import BaseRun, ForkPlan, prepare_fork, run_plan
from forklab.engine.fork.diff import RunDiff, diff_runs, format_run_diff, incurred_usd
from forklab.engine.fork.estimate import Estimate
from forklab.engine.fork.points import ForkPoint
from forklab.engine.fork.tail import Budget, Policy, SharedMemo
from forklab.engine.fork.wire import ForkResultWire
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import RecordedRun
from forklab.engine.runner import CancelToken
from forklab.engine.state import RunState
from forklab.engine.store import Store


@dataclass
class ForkResult:
    """What a fork did: its state, its base's, the point, the changes and the estimate —
    and, read on first use, its :attr:`diff` against the base."""

    run_id: str | None
    base_run_id: str
    fork_sequence_id: int
    fork_node_id: str | None
    state: RunState | None
    base_state: RunState
    prefix_state: RunState
    changes: list[dict[str, Any]]
    estimate: Estimate
    point: ForkPoint
    effective_fork_sequence_id: int
    store: Store
    warnings: list[str] = field(default_factory=list)
    label: str = ""
    fork_group_id: str | None = None
    own_changes: list[dict[str, Any]] | None = None  # this request's (``changes``: combined)
    point_notes: list[str] = field(default_factory=list)  # why the point moved
    scorer: Callable[[RunState], float] | None = field(default=None, repr=False)

    @cached_property
    def diff(self) -> RunDiff | None:
        """The fork against its base, step by step (None for a dry run), computed when
        first read and kept: both runs are finished, so it never changes. A caller that
        only wants the fork's state or its log (a sweep's worker, a script) does not pay
        for walking both runs whole (~5 ms for 1,000 steps, ~60 ms for 10,000).

        The walk is a bounded pass building a step per execution: the cyclic collector is
        paused for it (see :func:`~forklab.engine.collector.collector_paused`)."""
        if self.state is None:
            return None
        with collector_paused():
            return diff_runs(self.base_state, self.state, scorer=self.scorer,
                             changes=_describe(self._own()))

    @property
    def unpriced_calls(self) -> int:
        """Live calls of the tail to a model with no price (not in ``incurred_cost_usd``)."""
        return sum(1 for c in self.calls if c["label"] in ("live", "changed")
                   and c["cost_usd"] is None)

    @property
    def incurred_cost_usd(self) -> float | None:
        """What the tail paid; None when it called an unpriced model (see ``unpriced``)."""
        return incurred_usd(self.state) if self.state else 0.0

    @property
    def suppressed_effects(self) -> list[dict[str, Any]]:
        return list(self.state.suppressed_effects) if self.state else []

    @property
    def memo_hits(self) -> list[dict[str, Any]]:
        if self.state is None:
            return []
        skip = self.state.prefix_executions
        return [{"node": e.node, "occurrence": e.occurrence}
                for e in self.state.executions[skip:] if e.memo]

    @property
    def calls(self) -> list[dict[str, Any]]:
        if self.state is None:
            return []
        start = self.state.tail_from_call
        return [c.to_wire() for c in self.state.calls[start:]]

    @property
    def event_log(self) -> list[AnyEvent]:
        return self.store.read(self.run_id) if self.run_id else []

    def explain(self) -> str:
        point = self.point
        where = (f"before '{point.node}' execution {point.occurrence}, iteration "
                 f"{point.iteration}" if point.node else point.label)
        held = (f" of run {point.run_id}" if point.run_id not in (None, self.base_run_id)
                else "")
        header = (f"fork {self.run_id or '(dry run)'} of {self.base_run_id} at seq "
                  f"{self.fork_sequence_id}{held} ({where})")
        moved = [f"  point     {note}" for note in self.point_notes]
        if self.diff is None:
            est = self.estimate
            return "\n".join([
                header, *moved,
                f"  change    {'; '.join(_describe(self._own())) or 'none'}",
                f"  estimate  {est.live_calls} live calls, {est.tokens} tokens, "
                f"${est.cost_usd:.4f}",
                *(f"  warning   {w}" for w in self.warnings if w not in self.point_notes),
            ])
        lines = format_run_diff(self.diff, header).split("\n")
        if self.state is not None and self.state.status == "failed":
            status = next((i for i, line in enumerate(lines) if line.startswith("  status")), 0)
            lines.insert(status + 1, f"  error     {failure_text(self.state.error or {})}")
        lines[1:1] = moved
        if self.unpriced_calls:
            lines.append(f"  unpriced  {self.unpriced_calls} live call(s) to a model with no "
                         "price: not included in the cost above")
        return "\n".join(lines)

    def _own(self) -> list[dict[str, Any]]:
        return self.changes if self.own_changes is None else self.own_changes

    def to_wire(self) -> dict[str, Any]:
        """The fork-specific fields of the Fork result shape (SPEC §4.6), as JSON."""
        return self.wire_model().to_wire()

    def wire_model(self) -> ForkResultWire:
        """The fork-specific fields of the Fork result shape (SPEC §4.6), typed."""
        return ForkResultWire.from_wire({
            "run_id": self.run_id, "base_run_id": self.base_run_id,
            "fork_sequence_id": self.fork_sequence_id, "fork_node_id": self.fork_node_id,
            "effective_fork_sequence_id": self.effective_fork_sequence_id,
            "changes": self.changes, "estimate": self.estimate.wire(),
            "incurred_cost_usd": self.incurred_cost_usd,
            "suppressed_effects": self.suppressed_effects, "memo_hits": self.memo_hits,
            "calls": self.calls, "diff": self.diff.wire() if self.diff else None,
            "explain": self.explain(), "warnings": self.warnings,
            "unpriced_calls": self.unpriced_calls, "point": self.point.to_wire(),
        })


def _describe(changes: Sequence[dict[str, Any]]) -> list[str]:
    from forklab.engine.fork.changes import parse_change

    return [parse_change(c).describe() for c in changes]


def result_of(plan: ForkPlan, state: RunState | None, *, run_id: str | None, label: str,
              fork_group_id: str | None,
              scorer: Callable[[RunState], float] | None = None) -> ForkResult:
    """The result of a planned fork whose tail ended in ``state`` (None: a dry run);
    ``scorer`` scores both runs when its diff is read."""
    return ForkResult(
        run_id=run_id, base_run_id=plan.base.run_id, fork_sequence_id=plan.point.seq,
        fork_node_id=plan.effective.node, state=state, base_state=plan.base.state,
        prefix_state=plan.prefix_state, changes=plan.combined,
        estimate=plan.estimate, point=plan.point,
        effective_fork_sequence_id=plan.effective.seq, store=plan.base.store,
        warnings=plan.warnings, label=label, fork_group_id=fork_group_id,
        own_changes=wire(plan.changes), point_notes=plan.notes, scorer=scorer)


def fork(
    base: str | RecordedRun | BaseRun, *, at: Any = None,
    change: Change | dict[str, Any] | Sequence[Any] | Callable[[ForkPoint], Any] | None = None,
    policy: Policy | dict[str, Any] | None = None, budget: Budget | dict[str, Any] | None = None,
    label: str = "", run_id: str | None = None, fork_group_id: str | None = None,
    dry_run: bool = False, ignore_budget: bool = False,
    hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None = None,
    source: str = "events", graph_version: int | None = None,
    where: Callable[[RunState], bool] | None = None, store: Store | None = None,
    env: Environment | None = None, on_event: Callable[[Event], None] | None = None,
    cancel: CancelToken | None = None, scorer: Callable[[RunState], float] | None = None,
    shared_memo: SharedMemo | None = None,
) -> ForkResult:
    """Replay ``base`` to ``at``, apply ``change``, run the tail live, and compare.

    The prefix is rebuilt by folding the base's log: no model or tool calls. Raises a
    ForklabError (stable ``code``) for anything that cannot be forked as asked, before any
    event of the variant is written.
    """
    plan = prepare_fork(base, at=at, change=change, policy=policy, budget=budget,
                        ignore_budget=ignore_budget, source=source, store=store, env=env,
                        graph_version=graph_version, where=where)
    if dry_run:
        return result_of(plan, None, run_id=None, label=label, fork_group_id=fork_group_id)
    runner = run_plan(plan, run_id=run_id, label=label, fork_group_id=fork_group_id,
                      ignore_budget=ignore_budget, hitl=hitl, shared_memo=shared_memo,
                      on_event=on_event, cancel=cancel)
    return result_of(plan, runner.state, run_id=runner.run_id, label=label,
                     fork_group_id=fork_group_id, scorer=scorer)


def load_fork_result(run_id: str, *, store: Store, env: Environment | None = None,
                     scorer: Callable[[RunState], float] | None = None) -> ForkResult:
    """Rebuild a stored fork's result (diff against its base) from the two logs."""
    from forklab.engine.errors import RunNotFound
    from forklab.engine.fork.core import load_base
    from forklab.engine.fork.lineage import forked_event
    from forklab.engine.reducers import fold

    events = store.read(run_id)
    forked = forked_event(events)
    if forked is None:
        raise RunNotFound(f"run {run_id!r} is not a fork", run_id=run_id)
    state = fold(events)
    base = load_base(forked.base_run_id, store=store, env=env)
    recorded = forked.point or {}
    point = base.index.point_at(forked.fork_sequence_id, recorded.get("run_id")) or ForkPoint(
        seq=forked.fork_sequence_id, node=recorded.get("node", forked.fork_node_id),
        occurrence=recorded.get("occurrence"), iteration=recorded.get("iteration"),
        kind=recorded.get("kind", "before_node"), run_id=recorded.get("run_id"))
    est = forked.estimate
    estimate = Estimate(live_calls=int(est.get("live_calls", 0)), tokens=int(est.get("tokens", 0)),
                        cost_usd=float(est.get("cost_usd", 0.0)),
                        events_reused=forked.fork_sequence_id)
    prefix = RunState.from_wire(forked.prefix_state)
    own = list(forked.changes[forked.inherited_changes:])
    return ForkResult(
        run_id=run_id, base_run_id=base.run_id, fork_sequence_id=forked.fork_sequence_id,
        fork_node_id=forked.fork_node_id, state=state, base_state=base.state,
        prefix_state=prefix, changes=list(forked.changes), estimate=estimate,
        point=point, effective_fork_sequence_id=prefix.version, store=store,
        warnings=list(est.get("warnings", [])), label=state.label,
        fork_group_id=forked.fork_group_id, own_changes=own,
        point_notes=list(est.get("point_notes", [])), scorer=scorer)


def failure_text(error: dict[str, Any]) -> str:
    """Why a run failed, for people: the node and its error, and what to try next."""
    node, kind = error.get("node"), error.get("type")
    what = f"node {node!r} failed" if node else f"the run failed ({error.get('code', 'failed')})"
    message = str(error.get("message") or "no message recorded").rstrip(".")
    hint = ("; fork at 'failure' with a change to that node to try it another way" if node
            else "")
    return f"{what}{f' with {kind}' if kind else ''}: {message}{hint}"
