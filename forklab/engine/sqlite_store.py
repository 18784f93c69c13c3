"""A durable Store on one SQLite file (stdlib ``sqlite3``), safe across threads and processes.

Layout: ``runs`` (one row per run: creation order and the last seq ever appended, which
survives compaction and archiving), ``events`` (``UNIQUE(run_id, seq)``; the body is the JSON
of ``event.to_wire()``), ``graphs`` (``UNIQUE(graph_id, version)``; the JSON of
``graph.to_wire()`` in its own key order — a multi-role node runs its roles in mapping order,
so sorting keys would change what a reloaded graph does; identity is canonical equality) and
``snapshots`` (``UNIQUE(run_id, version)``; ``RunState.to_wire()`` JSON).

Invariants (on top of the protocol's, see :mod:`forklab.engine.store`):
- every thread (and every process) uses its own connection; the database runs in WAL mode,
  so readers never block the single writer and a reader sees only committed appends;
- ``append`` runs inside ``BEGIN IMMEDIATE``: the write lock is taken before the last seq is
  read, so two appenders (threads or processes) with the same ``expected_seq`` can never both
  win — the loser gets :class:`SeqConflictError`. ``UNIQUE(run_id, seq)`` is the backstop;
- an append is committed before ``append`` returns: a process killed (even SIGKILL) after
  that loses none of it, and one killed before leaves none of it;
- an event's ``at`` is kept as the exact float next to the wire body (the wire's ISO time has
  microsecond resolution), so a read event equals the appended one field for field.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from forklab.engine.canonical import canonical_equals
from forklab.engine.errors import GraphNotFound, RunNotFound, SeqConflictError
from forklab.engine.events import AnyEvent, Event, from_wire
from forklab.engine.graph import GraphSpec, parse_stored_graph
from forklab.engine.state import RunState
from forklab.engine.store import check_append, final_state_from_snapshots

BUSY_TIMEOUT_S = 30.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    ordinal INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    last_seq INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    at REAL NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (run_id, seq)
);
CREATE TABLE IF NOT EXISTS graphs (
    graph_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (graph_id, version)
);
CREATE TABLE IF NOT EXISTS snapshots (
    run_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (run_id, version)
);
"""


class SqliteStore:
    """Events, graph versions and snapshots in the SQLite file at ``path`` (created if absent)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        with self._write() as conn:  # not executescript: it would commit outside the lock
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)

    # -- connections -----------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (a new one after ``fork()``: connections do not survive it)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            return conn
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
            raise sqlite3.OperationalError(f"cannot switch {self.path} to WAL journal mode")
        conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable across crashes
        self._local.conn, self._local.pid = conn, os.getpid()
        with self._lock:
            self._connections.append(conn)
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction: committed on exit, rolled back on any error."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection this store opened (in any thread)."""
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()

    # -- events ----------------------------------------------------------------------------
    def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> None:
        """Append atomically after ``expected_seq``; raises SeqConflictError / EventGapError."""
        rows = [
            (run_id, e.seq, e.type, e.at, json.dumps(e.to_wire(), ensure_ascii=False))
            for e in events
        ]
        with self._write() as conn:
            check_append(run_id, events, expected_seq, self._last_seq(conn, run_id))
            if not rows:
                return
            try:
                conn.executemany(
                    "INSERT INTO events (run_id, seq, type, at, body) VALUES (?, ?, ?, ?, ?)",
                    rows,
                )
            except sqlite3.IntegrityError:  # pragma: no cover - the lock makes this unreachable
                raise SeqConflictError(
                    f"append to run {run_id!r} after seq {expected_seq} collided with a "
                    "concurrent append; re-read the log and retry",
                    run_id=run_id, expected_seq=expected_seq,
                ) from None
            conn.execute(  # the run row and its last seq in one statement
                "INSERT INTO runs (run_id, last_seq) VALUES (?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET last_seq = excluded.last_seq",
                (run_id, rows[-1][1]))

    def read(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[AnyEvent]:
        """Events with ``after < seq <= upto`` in seq order (one consistent WAL snapshot)."""
        cursor = self._conn().execute(
            "SELECT at, body FROM events WHERE run_id = ? AND seq > ? AND seq <= ? "
            "ORDER BY seq",
            (run_id, after, upto if upto is not None else 2**62),
        )
        events: list[AnyEvent] = []
        for at, body in cursor:
            data = json.loads(body)
            data["at"] = at
            events.append(from_wire(data))
        return events

    def last_seq(self, run_id: str) -> int:
        return self._last_seq(self._conn(), run_id)

    @staticmethod
    def _last_seq(conn: sqlite3.Connection, run_id: str) -> int:
        row = conn.execute("SELECT last_seq FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return int(row[0]) if row else 0

    @staticmethod
    def _touch_run(conn: sqlite3.Connection, run_id: str) -> None:
        conn.execute("INSERT OR IGNORE INTO runs (run_id) VALUES (?)", (run_id,))

    def run_ids(self) -> list[str]:
        """Every run with at least one event or snapshot (ever), oldest first."""
        rows = self._conn().execute("SELECT run_id FROM runs ORDER BY ordinal").fetchall()
        return [row[0] for row in rows]

    # -- graphs ----------------------------------------------------------------------------
    def save_graph(self, graph: GraphSpec) -> int:
        """Store a graph version; identical content returns the existing version."""
        wire = graph.to_wire()
        with self._write() as conn:
            row = conn.execute(
                "SELECT version, body FROM graphs WHERE graph_id = ? ORDER BY version DESC "
                "LIMIT 1", (graph.id,),
            ).fetchone()
            if row is not None and canonical_equals(json.loads(row[1]), wire):
                return int(row[0])
            version = 1 if row is None else int(row[0]) + 1
            conn.execute("INSERT INTO graphs (graph_id, version, body) VALUES (?, ?, ?)",
                         (graph.id, version, json.dumps(wire, ensure_ascii=False)))
            return version

    def load_graph(self, graph_id: str, version: int | None = None) -> GraphSpec:
        """A stored version (latest when None); raises GraphNotFound."""
        conn = self._conn()
        if version is None:
            row = conn.execute("SELECT body FROM graphs WHERE graph_id = ? ORDER BY version "
                               "DESC LIMIT 1", (graph_id,)).fetchone()
        else:
            row = conn.execute("SELECT body FROM graphs WHERE graph_id = ? AND version = ?",
                               (graph_id, version)).fetchone()
        if row is None:
            raise GraphNotFound(
                f"no graph {graph_id!r} version {version or 'latest'}; "
                f"known versions: {self.graph_versions(graph_id) or 'none'}",
                graph=graph_id, version=version,
            )
        return parse_stored_graph(row[0])

    def graph_versions(self, graph_id: str) -> list[int]:
        rows = self._conn().execute(
            "SELECT version FROM graphs WHERE graph_id = ? ORDER BY version", (graph_id,)
        ).fetchall()
        return [int(row[0]) for row in rows]

    # -- snapshots, compaction, retention --------------------------------------------------
    def save_snapshot(self, run_id: str, state: RunState) -> None:
        """Persist ``state`` at ``state.version`` (replacing a snapshot at that version)."""
        body = json.dumps(state.to_wire(), ensure_ascii=False)
        with self._write() as conn:
            self._touch_run(conn, run_id)
            conn.execute("INSERT OR REPLACE INTO snapshots (run_id, version, body) "
                         "VALUES (?, ?, ?)", (run_id, state.version, body))

    def load_snapshot(self, run_id: str, version: int | None = None) -> RunState | None:
        """The snapshot at ``version`` (newest when None), or None."""
        conn = self._conn()
        if version is None:
            row = conn.execute("SELECT body FROM snapshots WHERE run_id = ? ORDER BY version "
                               "DESC LIMIT 1", (run_id,)).fetchone()
        else:
            row = conn.execute("SELECT body FROM snapshots WHERE run_id = ? AND version = ?",
                               (run_id, version)).fetchone()
        return None if row is None else RunState.from_wire(json.loads(row[0]))

    def snapshot_versions(self, run_id: str) -> list[int]:
        rows = self._conn().execute(
            "SELECT version FROM snapshots WHERE run_id = ? ORDER BY version", (run_id,)
        ).fetchall()
        return [int(row[0]) for row in rows]

    def compact(self, run_id: str, upto: int) -> None:
        """Delete events with seq <= ``upto``; refused without a snapshot at or after it."""
        with self._write() as conn:
            covered = conn.execute(
                "SELECT 1 FROM snapshots WHERE run_id = ? AND version >= ? LIMIT 1",
                (run_id, upto),
            ).fetchone()
            if covered is None:
                raise RunNotFound(
                    f"run {run_id!r} has no snapshot at or after seq {upto}; "
                    "save one before compacting",
                    run_id=run_id,
                )
            conn.execute("DELETE FROM events WHERE run_id = ? AND seq <= ?", (run_id, upto))

    def archive(self, run_id: str) -> None:
        """Delete every event of the run; its last seq and snapshots stay."""
        with self._write() as conn:
            conn.execute("DELETE FROM events WHERE run_id = ?", (run_id,))

    def first_seq(self, run_id: str) -> int:
        row = self._conn().execute(
            "SELECT MIN(seq) FROM events WHERE run_id = ?", (run_id,)
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def load_final_state(self, run_id: str) -> RunState | None:
        """A finished run's final snapshot, if one was saved at its last event."""
        return final_state_from_snapshots(self, run_id)
