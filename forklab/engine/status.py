"""Statuses and labels: the closed sets of words a run, an execution and a call can carry.

A leaf module (imports nothing from forklab) so the reducers, the fork code, the Django models,
the API and the dashboard all name the same values. The values are the wire and stored-log
spelling and never change: ``RunStatus`` members are ``str`` (``StrEnum``), so they compare
equal to, hash like and JSON-encode as the plain strings already in stored logs, snapshots
and database rows.

Run statuses are a ``StrEnum`` because code outside the engine enumerates them (model
choices, API filters, the dashboard's status menu). Execution statuses and call labels are
``Literal`` aliases: they are only ever written as literals inside the engine, and a literal
costs nothing in the fold; mypy still rejects a word outside the set.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, get_args


class Words(StrEnum):
    """A closed set of wire words (members are their ``str`` values)."""

    @classmethod
    def values(cls) -> list[str]:
        """The plain values in declaration order (choices, filters, help text)."""
        return [word.value for word in cls]


class RunStatus(Words):
    """A run's lifecycle status (SPEC §4.6 ``status``)."""

    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


class RunKind(Words):
    """Why a run exists: started by a user, as a subgraph call, or as a fork of another."""

    PRIMARY = "primary"
    SUBGRAPH = "subgraph"
    COUNTERFACTUAL = "counterfactual"


class ForkState(Words):
    """A fork as the API reports it: its run's status, or ``complete`` / ``not_run``."""

    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETE = "complete"
    FAILED = "failed"
    BLOCKED = "blocked"
    NOT_RUN = "not_run"
    CANCELLED = "cancelled"


ACTIVE_STATUSES: frozenset[RunStatus] = frozenset(
    {RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.PAUSED})
FINISHED_STATUSES: frozenset[RunStatus] = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.BLOCKED, RunStatus.CANCELLED})

# One execution of one node. ``interrupted``: its process died mid-node; its writes were never
# committed. An execution open when its run ends takes the run's final status (``blocked``,
# ``cancelled``, ...).
ExecutionStatus = Literal["running", "paused", "completed", "failed", "interrupted", "blocked",
                          "cancelled"]
EXECUTION_STATUSES: tuple[ExecutionStatus, ...] = get_args(ExecutionStatus)

# A call's provenance (SPEC §5): reused from the base's log, made live, simulated from the
# base's recorded answer, made live because a change touched it, or blocked by policy.
CallLabel = Literal["reused", "live", "simulated", "changed", "blocked"]
CALL_LABELS: tuple[CallLabel, ...] = get_args(CallLabel)
# The labels whose calls were paid for by the fork itself.
PAID_LABELS: frozenset[CallLabel] = frozenset({"live", "changed"})

CallKind = Literal["agent", "tool", "human", "subgraph"]
CALL_KINDS: tuple[CallKind, ...] = get_args(CallKind)
