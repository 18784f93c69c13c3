"""A planned fork: everything decided before its tail runs (what preflight reports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forklab.engine.fork.base import BaseRun
from forklab.engine.fork.changes import Change, parse_changes, wire
from forklab.engine.fork.effective import Application
from forklab.engine.fork.estimate import Estimate
from forklab.engine.fork.points import ForkPoint
from forklab.engine.fork.tail import Policy
from forklab.engine.fork.wire import Budget
from forklab.engine.graph import GraphSpec
from forklab.engine.state import RunState


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
    prefix_state: RunState
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
