"""Stores: where event logs, graph versions and snapshots live.

The protocol is deliberately small. Every implementation (the in-memory one here, the
SQLite one in ``sqlite_store``, the Django one in ``forklab.runs``) passes the same contract
suite (``tests/engine/store_contract.py``).

Invariants every store keeps:
- ``append(run_id, events, expected_seq)`` is atomic: all events or none; it raises
  :class:`SeqConflictError` unless ``expected_seq`` is the run's last stored seq, and
  :class:`EventGapError` unless the events are numbered ``expected_seq + 1, +2, ...`` and
  belong to ``run_id``;
- ``append`` is also the batch verb: a list of many events costs one transaction (SQLite,
  PostgreSQL) and one update of whatever the store projects from its events, so writers
  should hand it batches (the runner appends a fork tail's served executions together);
- ``read`` returns events in seq order, ``after < seq <= upto``;
- ``save_graph`` returns the existing version for an identical spec and a new version
  (last + 1) for a changed one; versions are immutable.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from forklab.engine.canonical import canonical_json
from forklab.engine.errors import EventGapError, GraphNotFound, RunNotFound, SeqConflictError
from forklab.engine.events import AnyEvent, Event
from forklab.engine.graph import GraphSpec, parse_stored_graph
from forklab.engine.state import RunState


@runtime_checkable
class EventStore(Protocol):
    def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> None:
        """Append atomically after ``expected_seq`` (see module invariants)."""

    def read(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[AnyEvent]:
        """Events of ``run_id`` with ``after < seq <= upto``, in order."""

    def last_seq(self, run_id: str) -> int:
        """Seq of the run's last event (0 for an unknown run)."""

    def run_ids(self) -> list[str]:
        """Every run with at least one event or snapshot, oldest first."""


@runtime_checkable
class GraphStore(Protocol):
    def save_graph(self, graph: GraphSpec) -> int:
        """Store a graph version; identical content returns the existing version."""

    def load_graph(self, graph_id: str, version: int | None = None) -> GraphSpec:
        """A stored version (latest when None); raises GraphNotFound."""

    def graph_versions(self, graph_id: str) -> list[int]:
        """Versions of a graph, ascending (empty when unknown)."""


@runtime_checkable
class SnapshotStore(Protocol):
    def save_snapshot(self, run_id: str, state: RunState) -> None:
        """Persist ``state`` at ``state.version``."""

    def load_snapshot(self, run_id: str, version: int | None = None) -> RunState | None:
        """The snapshot at ``version`` (newest when None), or None."""

    def snapshot_versions(self, run_id: str) -> list[int]:
        """Snapshot versions of a run, ascending."""

    def compact(self, run_id: str, upto: int) -> None:
        """Delete events with seq <= ``upto`` (needs a snapshot at or after ``upto``)."""

    def archive(self, run_id: str) -> None:
        """Delete every event of the run (retention); snapshots stay."""

    def first_seq(self, run_id: str) -> int:
        """Seq of the earliest event still stored (0 when none)."""

    def load_final_state(self, run_id: str) -> RunState | None:
        """The state a finished run ended in, when the store keeps it (None: fold the log).

        Equal (canonically) to folding the run's whole log; readers of a finished run use it
        so no finished log is folded twice. Never the state of an unfinished run.
        """


def final_state_from_snapshots(store: Store, run_id: str) -> RunState | None:
    """A finished run's newest snapshot when it is taken at the run's last event."""
    snapshot = store.load_snapshot(run_id)
    if snapshot is None or not snapshot.finished:
        return None
    return snapshot if snapshot.version == store.last_seq(run_id) else None


class Store(EventStore, GraphStore, SnapshotStore, Protocol):
    """What the runner and the fork core need: events, graphs and snapshots.

    A store may also have ``idle()``, which the runner calls when it has nothing to do until
    a node on the pool moves (a model call in flight): deferred upkeep that never changes
    what is stored or read (``SqliteStore`` checkpoints its WAL). Optional, looked up by name.
    """


def check_append(run_id: str, events: Sequence[Event], expected_seq: int, last: int) -> None:
    """Shared append validation (every store calls it inside its own atomic section)."""
    if expected_seq != last:
        raise SeqConflictError(
            f"append to run {run_id!r} expected last seq {expected_seq} but the log is at "
            f"seq {last}; re-read the log and retry",
            run_id=run_id, expected_seq=expected_seq, last_seq=last,
        )
    for offset, event in enumerate(events, start=1):
        if event.run_id != run_id:
            raise EventGapError(
                f"event seq {event.seq} belongs to run {event.run_id!r}, not {run_id!r}",
                run_id=run_id,
            )
        if event.seq != expected_seq + offset:
            raise EventGapError(
                f"event seq {event.seq} breaks the sequence of run {run_id!r}; "
                f"expected seq {expected_seq + offset}",
                run_id=run_id, expected_seq=expected_seq + offset, found_seq=event.seq,
            )


def graph_hash(graph: GraphSpec) -> str:
    """Hash of the graph's stored form (computed once per graph object)."""
    return graph.content_hash


class MemoryStore:
    """A real in-memory store (thread-safe); what tests and ``run_recorded`` default to."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._events: dict[str, list[AnyEvent]] = {}
        self._offset: dict[str, int] = {}  # seq of the first event dropped by compaction
        self._graphs: dict[str, list[str]] = {}
        self._snapshots: dict[str, dict[int, dict[str, object]]] = {}

    # events ------------------------------------------------------------------------------
    def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> None:
        with self._lock:
            check_append(run_id, events, expected_seq, self.last_seq(run_id))
            if events:  # an empty append makes no run (run_ids lists runs with an event)
                self._events.setdefault(run_id, []).extend(events)  # type: ignore[arg-type]

    def read(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[AnyEvent]:
        with self._lock:
            log = self._events.get(run_id, [])
            base = self._offset.get(run_id, 0)
            start = max(0, after - base)
            stop = len(log) if upto is None else max(0, upto - base)
            return log[start:stop]

    def last_seq(self, run_id: str) -> int:
        with self._lock:
            log = self._events.get(run_id)
            if log:
                return log[-1].seq
            return self._offset.get(run_id, 0)

    def run_ids(self) -> list[str]:
        with self._lock:
            return list(dict.fromkeys([*self._events, *self._snapshots]))

    # graphs ------------------------------------------------------------------------------
    def save_graph(self, graph: GraphSpec) -> int:
        text = canonical_json(graph.to_wire())
        with self._lock:
            versions = self._graphs.setdefault(graph.id, [])
            if versions and versions[-1] == text:
                return len(versions)
            versions.append(text)
            return len(versions)

    def load_graph(self, graph_id: str, version: int | None = None) -> GraphSpec:
        with self._lock:
            versions = self._graphs.get(graph_id, [])
            index = len(versions) if version is None else version
            if not versions or not 1 <= index <= len(versions):
                raise GraphNotFound(
                    f"no graph {graph_id!r} version {version or 'latest'}; "
                    f"known versions: {list(range(1, len(versions) + 1)) or 'none'}",
                    graph=graph_id, version=version,
                )
            return parse_stored_graph(versions[index - 1])

    def graph_versions(self, graph_id: str) -> list[int]:
        with self._lock:
            return list(range(1, len(self._graphs.get(graph_id, [])) + 1))

    # snapshots ---------------------------------------------------------------------------
    def save_snapshot(self, run_id: str, state: RunState) -> None:
        with self._lock:
            self._snapshots.setdefault(run_id, {})[state.version] = state.to_wire()

    def load_snapshot(self, run_id: str, version: int | None = None) -> RunState | None:
        with self._lock:
            snaps = self._snapshots.get(run_id, {})
            if not snaps:
                return None
            key = max(snaps) if version is None else version
            return RunState.from_wire(snaps[key]) if key in snaps else None

    def snapshot_versions(self, run_id: str) -> list[int]:
        with self._lock:
            return sorted(self._snapshots.get(run_id, {}))

    def compact(self, run_id: str, upto: int) -> None:
        with self._lock:
            if not any(v >= upto for v in self.snapshot_versions(run_id)):
                raise RunNotFound(
                    f"run {run_id!r} has no snapshot at or after seq {upto}; "
                    "save one before compacting",
                    run_id=run_id,
                )
            base = self._offset.get(run_id, 0)
            log = self._events.get(run_id, [])
            drop = max(0, min(len(log), upto - base))
            self._events[run_id] = log[drop:]
            self._offset[run_id] = base + drop

    def archive(self, run_id: str) -> None:
        with self._lock:
            self._offset[run_id] = self.last_seq(run_id)
            self._events[run_id] = []

    def first_seq(self, run_id: str) -> int:
        with self._lock:
            log = self._events.get(run_id)
            return log[0].seq if log else 0

    def load_final_state(self, run_id: str) -> RunState | None:
        return final_state_from_snapshots(self, run_id)
