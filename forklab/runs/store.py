"""The engine's Store protocol on the Django ORM (SQLite and PostgreSQL).

Atomicity of ``append``: the whole append runs in one ``transaction.atomic``. On PostgreSQL
the run row is locked with ``SELECT … FOR UPDATE`` before the last seq is read; on SQLite the
transaction is ``BEGIN IMMEDIATE`` (settings), which takes the database write lock up front.
Either way two concurrent appenders serialize and the second sees the first's seq and gets
:class:`SeqConflictError`. ``unique(run, seq)`` is the backstop: a write error after which
the stored last seq moved (two first appends racing to create the run row, or a bypassed
lock) becomes the same error. Any other write error — a value the database cannot hold, a
constraint — is :class:`StoreRejected`, never reported as a race.

Leases: a store built with ``lease=owner`` fences every append on the run row's
``lease_owner`` (read under the same lock), and creates new runs leased to ``owner``
(``forklab.runs.leases``).

Projections: ``append`` stores the events, folds the run through them and hands the result
(an ``Appended``) to the write-side projections of ``forklab.runs.projections`` — the run
row, usage records, the final state, metrics — in the same transaction: the one place every
run, fork tail and sweep passes through. The state before the append comes from a
per-store cache of each open run's state (installed only once the transaction commits) or,
on a cache miss, from the newest snapshot plus the events after it — the whole log is not
refolded on every append.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.models import User as Account
from django.db import DataError, IntegrityError, transaction
from django.db.models import Max, Min, QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from forklab.engine.canonical import loads_for
from forklab.engine.errors import (
    EventGapError,
    ForklabError,
    GraphNotFound,
    RunNotFound,
    SeqConflictError,
    StoreRejected,
)
from forklab.engine.events import (
    AnyEvent,
    Event,
    RunForked,
    from_wire,
)
from forklab.engine.graph import GraphSpec, parse_stored_text
from forklab.engine.reducers import check_next, evolve
from forklab.engine.state import RunState
from forklab.engine.store import check_append, graph_hash
from forklab.runs import final_states, forked_rows, inserts
from forklab.runs import models as m
from forklab.runs.errors import LeaseLost
from forklab.runs.leases import ttl
from forklab.runs.projections import WRITE_PROJECTIONS, Appended

DEFAULT_PROJECT_SLUG = "default"
# an appended event's row, in the order ``_insert`` gives its values
_INSERTED = ("run_id", "seq", "type", "node", "occurrence", "iteration", "payload", "at",
             "timestamp", "v")
# a read event's columns, its payload as JSON text (decoded by canonical.loads_for)
_EVENT_FIELDS = ("seq", "type", "v", "node", "occurrence", "iteration",
                 Cast("payload", TextField()), "timestamp")


def _utf8(text: str) -> bytes | None:
    """``text``'s UTF-8 bytes; None for a text holding a lone surrogate (read as text)."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return None


def default_project(*, using: str = "default") -> m.Project:
    project, _ = m.Project.objects.using(using).get_or_create(
        slug=DEFAULT_PROJECT_SLUG, defaults={"name": "Default"}
    )
    return project


def _when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class DjangoStore:
    """A :class:`forklab.engine.store.Store` backed by the ORM.

    ``project`` scopes graphs (and ``run_ids``) and is the project new runs are created in
    (a counterfactual run with no explicit project joins its base run's project); when None,
    the ``default`` project is used. ``using`` names the database alias.
    """

    def __init__(self, project: m.Project | None = None, *, using: str = "default",
                 created_by: Account | None = None, lease: str | None = None) -> None:
        self._project = project
        self._explicit_project = project is not None
        self.using = using
        self.created_by = created_by
        self.lease = lease  # fencing: append only while the row's lease_owner is this
        self._states: dict[str, RunState] = {}
        self._lock = threading.Lock()

    @property
    def project(self) -> m.Project:
        if self._project is None:
            self._project = default_project(using=self.using)
        return self._project

    def _runs(self) -> QuerySet[m.Run]:
        return m.Run.objects.using(self.using)

    def _events(self) -> QuerySet[m.Event]:
        return m.Event.objects.using(self.using)

    # -- events ----------------------------------------------------------------------------
    def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> None:
        """Append atomically after ``expected_seq`` and update the run row's projection.

        Raises ``seq_conflict`` only when another writer really moved the log (the stored
        last seq is no longer ``expected_seq``); a store that refuses the events for any
        other reason (a constraint, a value it cannot hold) is ``store_rejected``; with a
        ``lease``, an append by a process that lost the run's lease is ``lease_lost``. In
        every case nothing was appended.
        """
        events = list(events)
        try:
            with transaction.atomic(using=self.using):
                locked = list(self._runs().select_for_update().filter(pk=run_id)
                              .values_list("last_seq", "project_id", "lease_owner")[:1])
                self._check_lease(run_id, locked)
                check_append(run_id, events, expected_seq, locked[0][0] if locked else 0)
                if not events:
                    return
                state = self._state_at(run_id, expected_seq)
                for event in events:
                    check_next(state, event)  # type: ignore[arg-type]
                    evolve(state, event)
                project_id = locked[0][1] if locked else self._new_run(run_id, state).project_id
                self._insert(run_id, events, project_id)
                batch = Appended(run_id=run_id, project_id=project_id, state=state,
                                 events=events, using=self.using)
                for projection in WRITE_PROJECTIONS:
                    projection.apply(batch)
                transaction.on_commit(lambda: self._remember(state), using=self.using)
        except (IntegrityError, DataError, ValueError) as exc:
            if isinstance(exc, ForklabError):
                raise
            raise self._refusal(run_id, expected_seq, events, exc) from None

    def _check_lease(self, run_id: str, locked: list[tuple[int, int, str]]) -> None:
        if self.lease is not None and locked and locked[0][2] != self.lease:
            raise LeaseLost(
                f"run {run_id!r} is no longer leased to this process (its lease is now "
                f"{locked[0][2] or 'free'!r}); another worker took it over — stop executing it",
                run_id=run_id)

    def _refusal(self, run_id: str, expected_seq: int, events: list[Event],
                 exc: Exception) -> ForklabError:
        """A write error as the error it really is: a race only if the log moved (the row's
        last seq, or an event already stored after ``expected_seq``)."""
        if (self.last_seq(run_id) != expected_seq
                or self._events().filter(run_id=run_id, seq__gt=expected_seq).exists()):
            return SeqConflictError(
                f"append to run {run_id!r} after seq {expected_seq} lost a race with another "
                "writer; re-read the log and retry",
                run_id=run_id, expected_seq=expected_seq,
            )
        reason = " ".join(str(exc).split())[:300].encode("ascii", "backslashreplace").decode()
        types = ", ".join(sorted({e.type for e in events}))
        return StoreRejected(
            f"the database refused to store events {expected_seq + 1}.."
            f"{expected_seq + len(events)} ({types}) of run {run_id!r}: {reason}; nothing was "
            "appended", run_id=run_id, expected_seq=expected_seq)

    def read(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[AnyEvent]:
        """The events after ``after`` (up to ``upto``), by seq.

        Payloads are selected as their JSON text and decoded by the engine's
        :func:`~forklab.engine.canonical.loads_for` (orjson wherever it reads the text as the
        json module does, which is what the column's own decoding calls): a base's 5,000
        payloads were ~40% of reading its log.
        """
        rows = self._events().filter(run_id=run_id, seq__gt=after)
        if upto is not None:
            rows = rows.filter(seq__lte=upto)
        found = list(rows.order_by("seq").values_list(*_EVENT_FIELDS))
        blobs = [_utf8(row[6]) for row in found]
        decode = loads_for([b for b in blobs if b is not None])
        events: list[AnyEvent] = []
        for (seq, type_, v, node, occ, it, text, ts), blob in zip(found, blobs, strict=True):
            payload = json.loads(text) if blob is None else decode(blob)
            if type_ == RunForked.TYPE:  # what the row keeps by reference, put back
                forked_rows.restore(run_id, payload, using=self.using, read=self._upto)
            events.append(from_wire({"seq": seq, "type": type_, "v": v, "node": node,
                                     "occurrence": occ, "iteration": it, "at": ts,
                                     "payload": payload}, run_id=run_id))
        return events

    def _upto(self, run_id: str, seq: int) -> list[AnyEvent]:
        return self.read(run_id, upto=seq)

    def last_seq(self, run_id: str) -> int:
        value = self._runs().filter(pk=run_id).values_list("last_seq", flat=True).first()
        return int(value or 0)

    def run_ids(self) -> list[str]:
        runs = self._runs()
        if self._explicit_project:
            runs = runs.filter(project=self.project)
        return list(runs.order_by("created_at", "id").values_list("id", flat=True))

    # -- the projection --------------------------------------------------------------------
    def _state_at(self, run_id: str, version: int) -> RunState:
        """The run's folded state at ``version``, owned by the caller (mutate freely)."""
        with self._lock:
            cached = self._states.pop(run_id, None)
        if cached is not None and cached.version == version:
            return cached
        if version == 0:
            return RunState()
        snapshot = (m.Snapshot.objects.using(self.using)
                    .filter(run_id=run_id, version__lte=version).order_by("-version").first())
        state = RunState.from_wire(snapshot.state) if snapshot else RunState()
        for event in self.read(run_id, after=state.version, upto=version):
            check_next(state, event)
            evolve(state, event)
        if state.version != version:
            raise EventGapError(
                f"run {run_id!r} cannot be rebuilt to seq {version}: its events were archived "
                "or compacted without a covering snapshot; it takes no further events",
                run_id=run_id,
            )
        return state

    def _remember(self, state: RunState) -> None:
        if state.finished:  # finished runs take no more appends; keep the cache small
            return
        with self._lock:
            self._states[state.run_id] = state

    def _new_run(self, run_id: str, state: RunState) -> m.Run:
        run = m.Run(id=run_id, project=self._project_for(state), created_by=self.created_by)
        if self.lease is not None:  # a run this executor creates is leased to it from birth
            now = timezone.now()
            run.lease_owner, run.lease_expires_at, run.heartbeat_at = self.lease, now + ttl(), now
        run.save(using=self.using, force_insert=True)
        return run

    def _project_for(self, state: RunState) -> m.Project:
        if not self._explicit_project and state.parent_run_id:
            parent = self._runs().filter(pk=state.parent_run_id).select_related("project").first()
            if parent is not None:
                return parent.project
        return self.project

    def _insert(self, run_id: str, events: list[Event], project_id: int) -> None:
        inserts.insert_values(m.Event, _INSERTED, [
            (run_id, e.seq, e.type, e.node, e.occurrence, e.iteration,
             forked_rows.stored_payload(e, events, project_id=project_id, using=self.using)
             if isinstance(e, RunForked) else e.payload(), _when(e.at), e.at, e.SCHEMA)
            for e in events
        ], using=self.using)

    # -- graphs ----------------------------------------------------------------------------
    def save_graph(self, graph: GraphSpec) -> int:
        spec_hash = graph_hash(graph)
        with transaction.atomic(using=self.using):
            row, _ = m.Graph.objects.using(self.using).get_or_create(
                project=self.project, graph_id=graph.id, defaults={"name": graph.name})
            row = m.Graph.objects.using(self.using).select_for_update().get(pk=row.pk)
            latest = row.versions.order_by("-version").first()
            if latest is not None and latest.spec_hash == spec_hash:
                return int(latest.version)
            version = (latest.version if latest else 0) + 1
            m.GraphVersion.objects.using(self.using).create(
                graph=row, version=version, spec=graph.to_wire(), spec_hash=spec_hash)
            if graph.name and graph.name != row.name:
                row.name = graph.name
                row.save(using=self.using, update_fields=["name"])
            return version

    def load_graph(self, graph_id: str, version: int | None = None) -> GraphSpec:
        """The stored version (the newest when ``version`` is None), parsed once per process
        (``parse_stored_text``: a server loads the same version for every run of it)."""
        versions = m.GraphVersion.objects.using(self.using).filter(
            graph__project=self.project, graph__graph_id=graph_id)
        versions = versions.order_by("-version") if version is None \
            else versions.filter(version=version)
        text = versions.values_list(Cast("spec", TextField()), flat=True).first()
        if text is None:
            raise GraphNotFound(
                f"no graph {graph_id!r} version {version or 'latest'} in project "
                f"{self.project.slug!r}; known versions: {self.graph_versions(graph_id) or 'none'}",
                graph=graph_id, version=version,
            )
        return parse_stored_text(text)[0]

    def graph_versions(self, graph_id: str) -> list[int]:
        return list(m.GraphVersion.objects.using(self.using)
                    .filter(graph__project=self.project, graph__graph_id=graph_id)
                    .order_by("version").values_list("version", flat=True))

    # -- snapshots, compaction, retention --------------------------------------------------
    def save_snapshot(self, run_id: str, state: RunState) -> None:
        with transaction.atomic(using=self.using):
            run = self._runs().filter(pk=run_id).first() or self._new_run(run_id, state)
            m.Snapshot.objects.using(self.using).update_or_create(
                run=run, version=state.version, defaults={"state": state.to_wire()})

    def load_snapshot(self, run_id: str, version: int | None = None) -> RunState | None:
        rows = m.Snapshot.objects.using(self.using).filter(run_id=run_id)
        row = (rows.order_by("-version").first() if version is None
               else rows.filter(version=version).first())
        return None if row is None else RunState.from_wire(row.state)

    def snapshot_versions(self, run_id: str) -> list[int]:
        return list(m.Snapshot.objects.using(self.using).filter(run_id=run_id)
                    .order_by("version").values_list("version", flat=True))

    def compact(self, run_id: str, upto: int) -> None:
        with transaction.atomic(using=self.using):
            newest = (m.Snapshot.objects.using(self.using).filter(run_id=run_id)
                      .aggregate(v=Max("version"))["v"])
            if newest is None or newest < upto:
                raise RunNotFound(
                    f"run {run_id!r} has no snapshot at or after seq {upto}; "
                    "save one before compacting",
                    run_id=run_id,
                )
            forked_rows.materialize_forks_of(run_id, using=self.using, read=self._upto)
            self._events().filter(run_id=run_id, seq__lte=upto).delete()

    def archive(self, run_id: str) -> None:
        with transaction.atomic(using=self.using):
            forked_rows.materialize_forks_of(run_id, using=self.using, read=self._upto)
            self._events().filter(run_id=run_id).delete()
            self._runs().filter(pk=run_id).update(archived=True)
        with self._lock:
            self._states.pop(run_id, None)

    def first_seq(self, run_id: str) -> int:
        value = self._events().filter(run_id=run_id).aggregate(s=Min("seq"))["s"]
        return int(value or 0)

    def load_final_state(self, run_id: str) -> RunState | None:
        """The ``FinalState`` row written with the event that finished the run."""
        return final_states.load(run_id, using=self.using)


# -- run.forked rows read outside the store (forklab.runs.forked_rows) -------------------------


def restored_payload(run_id: str, type_: str, payload: Any, *, using: str = "default") -> Any:
    """A payload read straight from an event row, as the engine wrote it (a ``run.forked``
    restored); any other payload as it is."""
    if type_ == RunForked.TYPE and isinstance(payload, dict):
        return forked_rows.restore(run_id, payload, using=using,
                                   read=DjangoStore(using=using)._upto)
    return payload


def forked_payload(run_id: str, *, using: str = "default") -> dict[str, Any] | None:
    """The fork's ``run.forked`` payload, restored; None for a run that is no fork."""
    payload = (m.Event.objects.using(using).filter(run_id=run_id, type=RunForked.TYPE)
               .values_list("payload", flat=True).first())
    return None if payload is None else restored_payload(run_id, RunForked.TYPE, payload,
                                                         using=using)


def on_run_deleted(sender: Any, instance: m.Run, using: str, **_: Any) -> None:
    """``pre_delete`` of a run: its forks by reference take a copy of their prefix, and of
    their final state, first."""
    forked_rows.materialize_forks_of(instance.pk, using=using,
                                     read=DjangoStore(using=using)._upto)
    final_states.materialize_dependents(instance.pk, using=using)
