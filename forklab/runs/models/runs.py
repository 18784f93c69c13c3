"""Runs, their event log, snapshots and usage records.

``Event`` rows are the truth (append-only, ``unique(run, seq)``). Every other column of
``Run`` is a projection of the folded state, rewritten by the store in the same transaction
as the events it derives from, so it is never ahead of or behind the log.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from forklab.engine.canonical import stored_json
from forklab.engine.status import FINISHED_STATUSES, RunKind, RunStatus
from forklab.runs.models.access import Project
from forklab.runs.models.graphs import GraphVersion

# every USD amount: up to 10 integer digits and 10 decimal places
USD_DIGITS, USD_PLACES = 20, 10


class StoredJSONEncoder(json.JSONEncoder):
    """The JSON text of the log's and the projections' JSON columns, written by
    :func:`forklab.engine.canonical.stored_json`: orjson where what it writes reads back to
    exactly what the json module's text does (~5x faster; a fork's final state is ~1 MB),
    else this encoder as Django's default (``ensure_ascii``: a lone surrogate an older
    version let in is escaped, as before) — so a column reads back as it always did, and a
    value the json module refuses is refused as before."""

    def encode(self, o: Any) -> str:
        return stored_json(o, super().encode)


__all__ = ["RunKind", "RunStatus"]  # the engine's: one set of words from the fold to the API


def _choices(words: type[RunKind] | type[RunStatus]) -> list[tuple[str, str]]:
    """Django choices for an engine ``StrEnum``: the value stored, and Django's default label
    for it (what ``TextChoices`` would derive, so the migration state does not move)."""
    return [(word.value, word.name.replace("_", " ").title()) for word in words]


class Run(models.Model):
    id = models.CharField(max_length=64, primary_key=True)  # the engine's run id
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    # RESTRICT: a version cannot go while runs use it, unless its project is deleted whole.
    graph_version = models.ForeignKey(
        GraphVersion, null=True, blank=True, on_delete=models.RESTRICT, related_name="runs"
    )
    # Denormalized from run.started so listings need no join (and survive a missing version).
    graph_slug = models.CharField(max_length=100, blank=True, db_index=True)
    graph_version_number = models.PositiveIntegerField(default=0)
    run_kind = models.CharField(max_length=16, choices=_choices(RunKind),
                                default=RunKind.PRIMARY.value)
    status = models.CharField(max_length=16, choices=_choices(RunStatus),
                              default=RunStatus.QUEUED.value)
    label = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )

    # Lineage (SPEC §3.10). No database constraint: a fork may be recorded before (or
    # without) its base, e.g. when a store is filled from an exported log.
    parent_run = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False,
        db_index=False, related_name="children",  # indexed by Meta.indexes "run_parent"
    )
    fork_sequence_id = models.PositiveIntegerField(null=True, blank=True)
    fork_node_id = models.CharField(max_length=100, null=True, blank=True)
    # wire-form changes
    fork_mutations = models.JSONField(encoder=StoredJSONEncoder, default=list, blank=True)
    fork_group_id = models.CharField(max_length=64, null=True, blank=True, db_index=True)
    replay_version = models.PositiveIntegerField(default=0)

    input = models.JSONField(encoder=StoredJSONEncoder, default=dict, blank=True)
    memory = models.JSONField(encoder=StoredJSONEncoder, default=dict, blank=True)
    path = models.JSONField(encoder=StoredJSONEncoder, default=list, blank=True)
    error = models.JSONField(encoder=StoredJSONEncoder, null=True, blank=True)

    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    # totals, inherited prefix included
    cost_usd = models.DecimalField(default=0, max_digits=USD_DIGITS, decimal_places=USD_PLACES)
    # what this run paid itself; null when its tail called an unpriced model (unknown)
    incurred_cost_usd = models.DecimalField(default=0, null=True, blank=True,
                                            max_digits=USD_DIGITS, decimal_places=USD_PLACES)
    unpriced_calls = models.PositiveIntegerField(default=0)

    last_seq = models.PositiveIntegerField(default=0)  # kept after archival/compaction
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    archived = models.BooleanField(default=False)  # events deleted by retention
    # Set by a cancel request; the runner checks it between nodes and calls (any process).
    cancel_requested = models.BooleanField(default=False)

    # Execution lease (forklab.runs.leases): the one process allowed to append to this run
    # now, until ``lease_expires_at`` unless its heartbeat renews it. Empty: nobody executes it.
    lease_owner = models.CharField(max_length=160, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # The background work this run waits for, kept so recovery can redo work that was lost
    # with its process: {"task": "fork", "spec": {...}} | {"task": "record", ...} |
    # {"task": "answer", "at_seq": N, "answer": {...}} (the answer to the gate at seq N).
    work = models.JSONField(null=True, blank=True)
    task_id = models.CharField(max_length=64, blank=True, default="")  # the queue's task id
    # An imported run's OpenTelemetry trace id (32 hex digits; SPEC §8); empty otherwise.
    trace_id = models.CharField(max_length=32, blank=True, default="", db_index=True)
    # ... and the conversation it belongs to (gen_ai.conversation.id / session.id), if named
    conversation_id = models.CharField(max_length=200, blank=True, default="", db_index=True)

    class Meta:
        ordering = ["-created_at", "id"]
        indexes = [
            models.Index(fields=["project", "status"], name="run_project_status"),
            models.Index(fields=["run_kind"], name="run_kind"),
            models.Index(fields=["parent_run"], name="run_parent"),
            models.Index(fields=["project", "-created_at"], name="run_project_created"),
            models.Index(fields=["status", "lease_expires_at"], name="run_status_lease"),
        ]

    def __str__(self) -> str:
        return f"{self.graph_slug}@{self.graph_version_number} {self.id[:8]} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def is_fork(self) -> bool:
        """A counterfactual run: what the fork endpoints and the fork live view read."""
        return self.run_kind == RunKind.COUNTERFACTUAL


class Event(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=64, db_index=True)
    node = models.CharField(max_length=100, null=True, blank=True)
    occurrence = models.PositiveIntegerField(null=True, blank=True)
    iteration = models.PositiveIntegerField(null=True, blank=True)
    payload = models.JSONField(encoder=StoredJSONEncoder, default=dict)
    at = models.DateTimeField()
    # The engine's exact float timestamp: ``at`` keeps microseconds only, and folded state
    # (started_at, durations) must round-trip exactly.
    timestamp = models.FloatField()
    v = models.PositiveSmallIntegerField(default=1)  # payload schema, for upcasting

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="event_unique_run_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"


class FinalState(models.Model):
    """A finished run's folded final state, written with the event that finished it.

    A projection cache like the run row's columns (the log stays the truth): pages that show
    a finished run — a diff above all — read one row instead of folding thousands of events.
    Kept out of ``Snapshot`` because snapshots are fork points users choose.
    """

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True,
                               related_name="final_state")
    version = models.PositiveIntegerField()  # the run's last seq when it finished
    # RunState.to_wire(); a fork's compact, by reference to its base's row (read it with
    # forklab.runs.final_states.load, never raw)
    state = models.JSONField(encoder=StoredJSONEncoder)
    # the run whose row a compact ``state`` references (None: stored whole). Its rows are
    # written whole before it goes (final_states.materialize_dependents); no database
    # constraint, so a fork finishing while its base is deleted is not refused — its row is
    # then a miss on read (the base row is gone), and the reader folds its log
    base = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL,
                             db_constraint=False, related_name="+")

    def __str__(self) -> str:
        return f"{self.run_id} final@{self.version}"


class ForkResult(models.Model):
    """A finished fork's result (SPEC §3: estimate, calls, diff, explain, warnings…), stored
    once so ``GET /forks/{id}/`` reads one row instead of both runs' logs.

    A projection cache like ``FinalState`` (``forklab.runs.projections``): ``version`` is the
    fork's last seq when it was computed; a row whose version is not the run's last seq is
    stale and recomputed on the next read.
    """

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True,
                               related_name="fork_result")
    version = models.PositiveIntegerField()
    # the Fork result fields of ForkResult.to_wire()
    result = models.JSONField(encoder=StoredJSONEncoder)

    def __str__(self) -> str:
        return f"{self.run_id} fork result@{self.version}"


class Snapshot(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="snapshots")
    version = models.PositiveIntegerField()  # seq of the last event folded into ``state``
    state = models.JSONField(encoder=StoredJSONEncoder)  # RunState.to_wire()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "version"]
        constraints = [
            models.UniqueConstraint(fields=["run", "version"], name="snapshot_unique_version"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}@{self.version}"


class UsageRecord(models.Model):
    """One model call (from ``agent.responded``): joins to runs for spend reports."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="usage")
    seq = models.PositiveIntegerField()
    node = models.CharField(max_length=100, blank=True)
    role = models.CharField(max_length=100, blank=True)  # "judge", "voters[2]"
    model = models.CharField(max_length=200)
    label = models.CharField(max_length=16)  # reused | live | simulated | changed
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost_usd = models.DecimalField(null=True, blank=True,  # null: unpriced model
                                   max_digits=USD_DIGITS, decimal_places=USD_PLACES)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="usage_unique_run_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.model}"
