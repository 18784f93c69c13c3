"""A planned fork: everything decided before its tail runs (what preflight reports)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from forklab.engine.fork.base import BaseRun
from forklab.engine.fork.changes import Change, parse_changes, wire
from forklab.engine.fork.effective import Application
from forklab.engine.fork.estimate import Estimate
from forklab.engine.fork.points import ForkPoint
from forklab.engine.fork.tail import Policy
from forklab.engine.fork.wire import Budget
from forklab.engine.graph import GraphSpec
from forklab.engine.state import RunState


class _Inputs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlannedPoint(_Inputs):
    """A resolved point as the plan inputs carry it (with its position in the logical run)."""

    seq: int
    node: str | None
    occurrence: int | None
    iteration: int | None
    kind: str = "before_node"
    run_id: str | None = None
    position: int | None = None
    label: str | None = None  # the wire form's human text; not needed to rebuild
    call: str | None = None

    @classmethod
    def of(cls, point: ForkPoint) -> PlannedPoint:
        return cls(**point.to_wire(), position=point.position)

    def point(self) -> ForkPoint:
        return ForkPoint(seq=self.seq, node=self.node, occurrence=self.occurrence,
                         iteration=self.iteration, kind=self.kind, run_id=self.run_id,
                         position=self.position, call=self.call)


class PlannedEstimate(_Inputs):
    live_calls: int
    tokens: int
    cost_usd: float
    unpriced_models: list[str]
    warnings: list[str]
    events_reused: int

    def estimate(self) -> Estimate:
        return Estimate(**self.model_dump())


class PlanInputs(_Inputs):
    """A fork's plan as the worker receives it (:meth:`ForkPlan.inputs`): the request path
    resolved, validated and estimated; the worker rebuilds the plan from this alone."""

    point: PlannedPoint
    effective: PlannedPoint
    changes: list[Change]
    source: str
    moved: bool
    memoize: bool
    estimate: PlannedEstimate
    warnings: list[str]
    point_notes: list[str]
    routes_used: list[str]
    one_call: str | None = None  # a one-call fork of an imported run: the call it re-asks

    def wire(self) -> dict[str, Any]:
        """The JSON a queue carries (validates back with ``model_validate``)."""
        return self.model_dump(mode="json", by_alias=True)


@dataclass
class ForkPlan:
    """Everything decided before the tail runs (what preflight reports).

    ``changes`` are this request's; ``combined`` what the fork records (its lineage's, then
    its own); ``active`` the changes the tail serves (node-level ones of the whole lineage).
    """

    base: BaseRun
    point: ForkPoint
    effective: ForkPoint
    changes: list[Change]
    graph: GraphSpec
    # the state at the effective point, or how to fold it: folded only when first asked for
    # (the tail, a dry run), so accepting a fork does not fold the base's prefix for a worker
    # that folds it again
    prefix: RunState | Callable[[], RunState]
    new_input: dict[str, Any]
    changed_inputs: set[str]
    policy: Policy
    budget: Budget
    memoize: bool
    estimate: Estimate
    application: Application
    warnings: list[str] = field(default_factory=list)
    source: str = "events"
    routes_used: list[str] = field(default_factory=list)
    # which run's log, folded to which seq, ``prefix_state`` is (empty: not such a fold)
    prefix_ref: dict[str, Any] = field(default_factory=dict)
    # what the result says about the point (``application.warnings()``); set when the plan
    # was rebuilt from its inputs, whose application no longer knows how the point moved
    point_notes: list[str] | None = None
    # a one-call fork of an imported run (SPEC §8 (a), ``fork.onecall``): the call it
    # re-asks; its tail is that call alone
    one_call: str | None = None

    @property
    def notes(self) -> list[str]:
        """The point's notes: a moved point, keys a prefix node overwrote."""
        return self.application.warnings() if self.point_notes is None else self.point_notes

    def inputs(self) -> PlanInputs:
        """What the worker needs to rebuild this plan without resolving or estimating again
        (:func:`forklab.engine.fork.core.plan_from_inputs`); its JSON dump is what a queue
        carries (``Run.work["plan"]``).

        The points are resolved (``effective`` is where the tail starts), the changes are
        normalised, and the estimate and warnings are the request's: the base is a finished
        run, so none of them can differ when the worker rebuilds the plan.
        """
        est = self.estimate
        return PlanInputs(
            point=PlannedPoint.of(self.point), effective=PlannedPoint.of(self.effective),
            changes=list(self.changes), source=self.source, moved=self.application.moved,
            memoize=self.memoize,
            estimate=PlannedEstimate(live_calls=est.live_calls, tokens=est.tokens,
                                     cost_usd=est.cost_usd,
                                     unpriced_models=list(est.unpriced_models),
                                     warnings=list(est.warnings),
                                     events_reused=est.events_reused),
            warnings=list(self.warnings), point_notes=self.notes,
            routes_used=list(self.routes_used), one_call=self.one_call)

    @property
    def prefix_state(self) -> RunState:
        if callable(self.prefix):
            self.prefix = self.prefix()
        return self.prefix

    @property
    def inherited(self) -> list[dict[str, Any]]:
        return list(self.base.state.changes)

    @property
    def combined(self) -> list[dict[str, Any]]:
        """The fork's ``fork_mutations``: every ancestor's changes, then this request's."""
        return self.inherited + wire(self.changes)

    @property
    def active(self) -> list[Change]:
        return parse_changes(self.combined) if self.combined else []

    def preflight(self) -> dict[str, Any]:
        """The body of ``POST /forks/preflight/``."""
        return {
            "fork_sequence_id": self.point.seq, "fork_node_id": self.point.node,
            "effective_fork_sequence_id": self.effective.seq,
            "events_reused": self.estimate.events_reused,
            "estimate": self.estimate.wire(), "warnings": self.warnings,
            "point": self.point.to_wire(), "effective_point": self.effective.to_wire(),
            "changes": wire(self.changes),
        }
