"""A durable Store on one SQLite file (stdlib ``sqlite3``), safe across threads and processes.

Layout (:data:`LAYOUT`, kept in ``PRAGMA user_version``): ``runs`` (one row per run: its
``ordinal`` — creation order, and the high half of its events' keys — and, written when
events of the run are compacted or archived away, the last seq they held; an append writes
no run row, the log's own last seq is its last seq), ``event_rows`` (``key INTEGER PRIMARY
KEY`` = ``ordinal << 32 | seq``, so a run's log is one range of the table's own B-tree and
an append touches no second index: half the WAL pages per transaction of a table keyed by
rowid beside a ``UNIQUE (run_id, seq)`` index; ``type``; ``at``, the exact float time; the
body is the JSON of ``event.stored_body()``: the wire form without what the key and the
columns hold — run id, seq, type and the ISO ``at``; bodies written with them, before,
read the same), the view ``events`` (``run_id``, ``seq``,
``type``, ``at``, ``body``: the rows by run id and seq, for queries by hand),
``graphs`` (``UNIQUE(graph_id, version)``; the JSON of
``graph.to_wire()`` in its own key order — a multi-role node runs its roles in mapping order,
so sorting keys would change what a reloaded graph does; identity is canonical equality) and
``snapshots`` (``UNIQUE(run_id, version)``; ``RunState.to_wire()`` JSON). A file of the
first layout (an ``events`` table keyed by run id and seq) is moved to this one, in one
transaction, by the first store that opens it; a file of a later layout is refused.

Invariants (on top of the protocol's, see :mod:`forklab.engine.store`):
- every thread (and every process) uses its own connection; the database runs in WAL mode,
  so readers never block the single writer and a reader sees only committed appends;
- ``append`` runs inside ``BEGIN IMMEDIATE``: the write lock is taken before the last seq is
  read, so two appenders (threads or processes) with the same ``expected_seq`` can never both
  win — the loser gets :class:`SeqConflictError`. The primary key (one per run and seq) is
  the backstop;
- an append is committed before ``append`` returns: a process killed (even SIGKILL) after
  that loses none of it, and one killed before leaves none of it;
- an event's ``at`` is kept as the exact float next to the wire body (the wire's ISO time has
  microsecond resolution, and the body leaves it out), so a read event equals the appended
  one field for field;
- a fork's prefix is stored by reference: a ``run.forked`` event whose ``prefix_ref`` names
  a run of this file whose log is whole from seq 1 is stored without its ``prefix_state``,
  and ``read`` puts it back (that run's log folded to the referenced seq — the state the
  fork copied, canonically equal). So a fork stores its tail, not a second copy of its
  prefix's executions. Before ``archive`` or ``compact`` deletes events of a run, every fork
  that references it gets its prefix written into its own ``run.forked`` row, in the same
  transaction: a fork never loses its prefix, and reads the same before and after;
- a fork's effective graph is stored by reference too: when the ``run.started`` appended
  with its ``run.forked`` names a graph version stored in this file, the row keeps the
  nodes and fields that differ from that version (:mod:`forklab.engine.graph_delta`)
  instead of the whole graph, and ``read`` rebuilds it key for key. Graph versions are
  never deleted, so archiving or compacting the base (or any run) leaves it readable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from forklab.engine.canonical import canonical_equals, loads, loads_for, stored_json
from forklab.engine.errors import (
    GraphNotFound,
    RunNotFound,
    SeqConflictError,
    SourceMissing,
    StoreRejected,
    VersionSkewError,
)
from forklab.engine.events import AnyEvent, Event, RunForked, RunStarted, from_stored
from forklab.engine.graph import GraphSpec, parse_stored_text
from forklab.engine.graph_delta import StoredVersion, apply_delta, delta
from forklab.engine.prefix_refs import ReferencedPrefixes
from forklab.engine.state import RunState
from forklab.engine.store import check_append, final_state_from_snapshots

BUSY_TIMEOUT_S = 30.0
WAL_CHECKPOINT_PAGES = 10_000
"""WAL pages a commit may leave before it checkpoints them into the database file (SQLite's
default is 1,000). Each checkpoint syncs the WAL and the database (three ``fdatasync``
calls), and a recording writes ~2.3 WAL pages per node (each transaction rewrites the
tail pages of ``event_rows`` — no second index since layout 2, which halved it — and,
as the file grows, its header page; the run row is not written per append), so the
default would checkpoint a 1,000-node chain twice while it ran. With 10,000 such a run
checkpoints once, when the file's last connection closes (which also deletes the WAL). The
price is disk: the WAL grows to ~40 MB before it is reused; readers are unaffected (they
find a page through the WAL index whatever its size)."""
IDLE_CHECKPOINT_CHARS = 512 * 1024
"""Event body text appended since the last checkpoint that :meth:`SqliteStore.idle`
checkpoints (below it, the file's closing checkpoint is cheap anyway)."""
VERSION_CACHE_SIZE = 8  # stored graph versions kept decoded for fork graph deltas

LAYOUT = 2
"""The file layout this module writes (``PRAGMA user_version``; 0 on a file of the first
layout, which had no number)."""
SEQ_BITS = 32
"""A key's low bits: the seq (so a run holds fewer than 2**32 events, and a file fewer than
2**31 runs: keys are signed 64-bit integers). Fixed by :data:`LAYOUT` — the SQL of this
module spells it as ``32`` and ``4294967295``; another width is another layout."""
SEQ_MASK = (1 << SEQ_BITS) - 1
MAX_ORDINAL = (1 << (63 - SEQ_BITS)) - 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    ordinal INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    last_seq INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS event_rows (
    key INTEGER PRIMARY KEY,
    type TEXT NOT NULL,
    at REAL NOT NULL,
    body TEXT NOT NULL
);
CREATE VIEW IF NOT EXISTS events (run_id, seq, type, at, body) AS
    SELECT runs.run_id, event_rows.key & 4294967295, event_rows.type, event_rows.at,
           event_rows.body
    FROM event_rows JOIN runs ON runs.ordinal = event_rows.key >> 32;
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


def _create_or_migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Create this layout's tables in a new file, or move a first-layout file to it (in the
    caller's ``BEGIN IMMEDIATE``: two processes opening one old file cannot both move it,
    and a failure leaves the file as it was). Refuses a file of a later layout."""
    layout = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if layout > LAYOUT:
        raise VersionSkewError(
            f"{path} was written by a newer forklab (store layout {layout}; this one reads "
            f"layout {LAYOUT} and earlier); open it with that version, or upgrade",
            path=str(path), recorded=layout, current=LAYOUT)
    found = conn.execute("SELECT type FROM sqlite_master WHERE name = 'events'").fetchone()
    first_layout = found is not None and found[0] == "table"
    if first_layout:  # its rows are copied below, under their run's ordinal
        conn.execute("ALTER TABLE events RENAME TO events_first_layout")
    for statement in filter(str.strip, _SCHEMA.split(";")):
        conn.execute(statement)
    if first_layout:
        # a run whose row the first layout never wrote gets one, in the order it began
        conn.execute("INSERT OR IGNORE INTO runs (run_id) SELECT run_id FROM "
                     "events_first_layout GROUP BY run_id ORDER BY MIN(rowid)")
        conn.execute("INSERT INTO event_rows (key, type, at, body) "
                     "SELECT (runs.ordinal << 32) | old.seq, old.type, old.at, old.body "
                     "FROM events_first_layout AS old JOIN runs USING (run_id)")
        conn.execute("DROP TABLE events_first_layout")
    if layout != LAYOUT:
        conn.execute(f"PRAGMA user_version = {LAYOUT}")


def _log_range(ordinal: int, after: int = 0, upto: int = SEQ_MASK) -> tuple[int, int]:
    """The keys ``(low, high]`` of a run's events with ``after < seq <= upto`` (both clamped
    to the seq half: a bound past it must not reach into the next run's keys)."""
    base = ordinal << SEQ_BITS
    return base | min(max(after, 0), SEQ_MASK), base | min(max(upto, 0), SEQ_MASK)


class SqliteStore:
    """Events, graph versions and snapshots in the SQLite file at ``path`` (created if absent)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._prefixes = ReferencedPrefixes()  # the states forks keep by reference
        self._versions: OrderedDict[tuple[str, int], StoredVersion] = OrderedDict()
        self._unchecked = 0  # body text appended since the last checkpoint (see idle)
        # run id -> ordinal, for runs whose row is committed (an ordinal never changes, and
        # a row is never deleted; one read in a rolled-back append is not kept)
        self._ordinals: dict[str, int] = {}
        with self._write() as conn:  # not executescript: it would commit outside the lock
            _create_or_migrate(conn, self.path)

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
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
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
        with self._write() as conn:
            check_append(run_id, events, expected_seq, self._last_seq(conn, run_id))
            if not events:
                return
            if events[-1].seq > SEQ_MASK:
                raise StoreRejected(
                    f"run {run_id!r} would reach seq {events[-1].seq}; a SQLite store holds "
                    f"at most {SEQ_MASK:,} events per run — nothing was appended; continue "
                    "in a fork of its last snapshot", run_id=run_id, seq=events[-1].seq)
            if not expected_seq:  # the run's first events: its row (creation order)
                self._touch_run(conn, run_id)
            ordinal = self._ordinal(conn, run_id)
            assert ordinal is not None  # written above, or a last seq was found under it
            rows = [((ordinal << SEQ_BITS) | e.seq, e.TYPE, e.at,
                     stored_json(self._stored_wire(conn, e, events))) for e in events]
            try:
                conn.executemany(
                    "INSERT INTO event_rows (key, type, at, body) VALUES (?, ?, ?, ?)", rows)
            except sqlite3.IntegrityError:  # pragma: no cover - the lock makes this unreachable
                raise SeqConflictError(
                    f"append to run {run_id!r} after seq {expected_seq} collided with a "
                    "concurrent append; re-read the log and retry",
                    run_id=run_id, expected_seq=expected_seq,
                ) from None
            appended = sum(len(row[3]) for row in rows)
        with self._lock:  # committed: the ordinal is the run's for good
            self._unchecked += appended
            self._ordinals[run_id] = ordinal

    def idle(self) -> None:
        """Upkeep while the caller waits on something else (a runner whose node waits on a
        model call): once :data:`IDLE_CHECKPOINT_CHARS` of bodies were appended since the
        last one, checkpoint the WAL into the database file, on this thread's connection
        (the GIL is released meanwhile). ``PASSIVE``: it never waits for a reader or the
        writer, and copies what it can. A fork's 1,000 served nodes stored beside its
        join's call are then checkpointed during that call too, instead of by the closing
        checkpoint of the file's last connection after it (~4 ms of wall for ~1 MB of WAL,
        ~0.7 ms once checkpointed). Never needed: the closing checkpoint copies whatever is
        left."""
        with self._lock:
            if self._unchecked < IDLE_CHECKPOINT_CHARS:
                return
            self._unchecked = 0
        self._conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()

    def read(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[AnyEvent]:
        """Events with ``after < seq <= upto`` in seq order (one consistent WAL snapshot)."""
        conn = self._conn()
        ordinal = self._ordinal(conn, run_id)
        if ordinal is None:
            return []
        rows = conn.execute(
            # the body as a blob: its UTF-8 bytes, which the decoder reads as they are
            "SELECT key, type, at, CAST(body AS BLOB) FROM event_rows "
            "WHERE key > ? AND key <= ? ORDER BY key",
            _log_range(ordinal, after, SEQ_MASK if upto is None else upto),
        ).fetchall()
        events: list[AnyEvent] = []
        decode = loads_for([row[3] for row in rows])
        for key, type_, at, body in rows:
            data = decode(body)
            if type_ == RunForked.TYPE:
                self._restore_forked(run_id, data["payload"])
            # the columns' seq and type (a body of the first layout holds the same ones)
            events.append(from_stored(type_, run_id, key & SEQ_MASK, at, data))
        return events

    # -- fork prefixes by reference ----------------------------------------------------------
    def _stored_wire(self, conn: sqlite3.Connection, event: Event,
                     batch: Sequence[Event]) -> dict[str, object]:
        """The body stored for ``event``: :meth:`~Event.stored_body`, minus what a fork's
        ``run.forked`` can keep by reference (see the module invariants): its prefix state
        when a whole log in this file folds to it, its graph when a stored version plus a
        delta rebuilds it."""
        if not isinstance(event, RunForked):
            return event.stored_body()
        ref_run, ref_seq = event.prefix_ref.get("run_id"), event.prefix_ref.get("seq")
        by_reference = (isinstance(ref_run, str) and isinstance(ref_seq, int)
                        and event.prefix_names() == (ref_run, ref_seq)
                        and self._whole_log_upto(conn, ref_run, ref_seq))
        if by_reference:  # replaced, not read: a live fork's prefix wire form is made on
            event = dataclasses.replace(event, prefix_state={})  # first read (never, here)
        wire = event.stored_body()
        payload = wire["payload"]
        if by_reference:
            del payload["prefix_state"]
        graph_delta = self._graph_delta(conn, event.graph, batch)
        if graph_delta is not None:
            del payload["graph"]
            payload["graph_delta"] = graph_delta
        return wire

    def _graph_delta(self, conn: sqlite3.Connection, graph: dict[str, object],
                     batch: Sequence[Event]) -> dict[str, object] | None:
        """``graph`` as a delta against the stored version its run started on (named by the
        ``run.started`` of the same append), or None: then the copy is kept."""
        started = next((e for e in batch if isinstance(e, RunStarted)), None)
        if started is None or graph.get("id") != started.graph_id:
            return None
        version = self._stored_version(conn, started.graph_id, started.graph_version)
        if version is None:
            return None
        return delta(graph, version, graph_id=started.graph_id, number=started.graph_version)

    def _stored_version(self, conn: sqlite3.Connection, graph_id: str,
                        version: int) -> StoredVersion | None:
        key = (graph_id, version)
        with self._lock:
            found = self._versions.get(key)
        if found is None:
            body = self._graph_body(conn, graph_id, version)
            if body is None:
                return None
            found = StoredVersion(loads(body))
            self._keep_version(key, found)
        return found

    def _keep_version(self, key: tuple[str, int], version: StoredVersion) -> None:
        with self._lock:  # a stored version never changes: the entry never goes stale
            self._versions[key] = version
            self._versions.move_to_end(key)
            while len(self._versions) > VERSION_CACHE_SIZE:
                self._versions.popitem(last=False)

    @staticmethod
    def _graph_body(conn: sqlite3.Connection, graph_id: str, version: int) -> str | None:
        row = conn.execute("SELECT body FROM graphs WHERE graph_id = ? AND version = ?",
                           (graph_id, version)).fetchone()
        return None if row is None else str(row[0])

    def _whole_log_upto(self, conn: sqlite3.Connection, run_id: str, seq: int) -> bool:
        """Whether this file holds every event of ``run_id`` from seq 1 to ``seq``."""
        ordinal = self._ordinal(conn, run_id)
        if ordinal is None or not 0 < seq <= SEQ_MASK:
            return False
        low, high = _log_range(ordinal, 0, seq)
        row = conn.execute("SELECT MIN(key), MAX(key), COUNT(*) FROM event_rows "
                           "WHERE key > ? AND key <= ?", (low, high)).fetchone()
        return bool(row and row[0] == low + 1 and row[1] == high and row[2] == seq)

    def _restore_forked(self, run_id: str, payload: dict[str, object]) -> None:
        """Put back what a stored ``run.forked`` keeps by reference."""
        graph_delta = payload.pop("graph_delta", None)
        if isinstance(graph_delta, dict):
            body = self._graph_body(self._conn(), graph_delta["graph_id"],
                                    graph_delta["version"])
            if body is None:  # unreachable unless the file was edited by hand
                raise SourceMissing(
                    f"fork {run_id!r} stores its graph as a change of graph "
                    f"{graph_delta['graph_id']!r} version {graph_delta['version']}, which is "
                    f"not in {self.path}", run_id=run_id)
            payload["graph"] = apply_delta(loads(body), graph_delta)
        if "prefix_state" not in payload:
            payload["prefix_state"] = self._referenced_prefix(
                run_id, payload["prefix_ref"])  # type: ignore[arg-type]

    def _referenced_prefix(self, fork_id: str, ref: dict[str, object]) -> dict[str, object]:
        """Run ``ref["run_id"]``'s state at ``ref["seq"]`` in wire form (its log folded; a
        fresh object per call, so callers own it)."""
        return self._prefixes.state(fork_id, ref, lambda run, seq: self.read(run, upto=seq),
                                    where=str(self.path))

    def _materialize_forks_of(self, conn: sqlite3.Connection, run_id: str) -> None:
        """Copy the prefix into every fork stored by reference to ``run_id``'s log (called in
        the write transaction that is about to delete some of that log)."""
        rows = conn.execute(
            "SELECT runs.run_id, event_rows.key, event_rows.body FROM event_rows "
            "JOIN runs ON runs.ordinal = event_rows.key >> 32 WHERE event_rows.type = ? "
            "AND json_extract(event_rows.body, '$.payload.prefix_ref.run_id') = ? "
            "AND json_type(event_rows.body, '$.payload.prefix_state') IS NULL",
            (RunForked.TYPE, run_id),
        ).fetchall()
        for fork_id, key, body in rows:
            data = json.loads(body)
            data["payload"]["prefix_state"] = self._referenced_prefix(
                fork_id, data["payload"]["prefix_ref"])
            conn.execute("UPDATE event_rows SET body = ? WHERE key = ?",
                         (json.dumps(data, ensure_ascii=False), key))

    def last_seq(self, run_id: str) -> int:
        return self._last_seq(self._conn(), run_id)

    def _last_seq(self, conn: sqlite3.Connection, run_id: str) -> int:
        """The last seq ever appended: the log's own last one, or what the run row kept of
        a log compacted or archived away (one B-tree seek each, no write per append)."""
        ordinal = self._ordinal(conn, run_id)
        if ordinal is None:  # no row: nothing was ever appended
            return 0
        row = conn.execute(
            "SELECT MAX(COALESCE((SELECT MAX(key) FROM event_rows WHERE key > ? AND key <= ?)"
            " & 4294967295, 0), (SELECT last_seq FROM runs WHERE ordinal = ?))",
            (*_log_range(ordinal), ordinal),
        ).fetchone()
        return int(row[0])

    def _ordinal(self, conn: sqlite3.Connection, run_id: str) -> int | None:
        """The run's ordinal (the high half of its keys), or None before its row exists."""
        ordinal = self._ordinals.get(run_id)
        if ordinal is not None:
            return ordinal
        row = conn.execute("SELECT ordinal FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        if row[0] > MAX_ORDINAL:  # pragma: no cover - 2**31 runs in one file
            raise StoreRejected(f"{self.path} holds {MAX_ORDINAL:,} runs, its most; start "
                                "another file", run_id=run_id)
        if not conn.in_transaction:  # committed (a write's own new row waits for its commit)
            with self._lock:
                self._ordinals[run_id] = int(row[0])
        return int(row[0])

    def _keep_last_seq(self, conn: sqlite3.Connection, run_id: str) -> None:
        """Write the run's last seq into its row before events of it are deleted."""
        conn.execute("UPDATE runs SET last_seq = ? WHERE run_id = ?",
                     (self._last_seq(conn, run_id), run_id))

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
            row = conn.execute("SELECT version, body FROM graphs WHERE graph_id = ? ORDER BY "
                               "version DESC LIMIT 1", (graph_id,)).fetchone()
        else:
            row = conn.execute("SELECT version, body FROM graphs WHERE graph_id = ? AND "
                               "version = ?", (graph_id, version)).fetchone()
        if row is None:
            raise GraphNotFound(
                f"no graph {graph_id!r} version {version or 'latest'}; "
                f"known versions: {self.graph_versions(graph_id) or 'none'}",
                graph=graph_id, version=version,
            )
        graph, decoded = parse_stored_text(str(row[1]))
        if decoded is not None:  # decoded now: a fork of a run on it diffs against it next
            self._keep_version((graph_id, int(row[0])), StoredVersion(decoded))
        return graph

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
        return None if row is None else RunState.from_wire(loads(row[0]), owned=True)

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
            self._materialize_forks_of(conn, run_id)
            self._keep_last_seq(conn, run_id)
            self._delete_events(conn, run_id, upto)

    def archive(self, run_id: str) -> None:
        """Delete every event of the run; its last seq and snapshots stay."""
        with self._write() as conn:
            self._materialize_forks_of(conn, run_id)
            self._keep_last_seq(conn, run_id)
            self._delete_events(conn, run_id, SEQ_MASK)

    def _delete_events(self, conn: sqlite3.Connection, run_id: str, upto: int) -> None:
        ordinal = self._ordinal(conn, run_id)
        if ordinal is not None:
            conn.execute("DELETE FROM event_rows WHERE key > ? AND key <= ?",
                         _log_range(ordinal, 0, upto))

    def first_seq(self, run_id: str) -> int:
        conn = self._conn()
        ordinal = self._ordinal(conn, run_id)
        if ordinal is None:
            return 0
        row = conn.execute("SELECT MIN(key) FROM event_rows WHERE key > ? AND key <= ?",
                           _log_range(ordinal)).fetchone()
        return int(row[0]) & SEQ_MASK if row and row[0] is not None else 0

    def load_final_state(self, run_id: str) -> RunState | None:
        """A finished run's final snapshot, if one was saved at its last event."""
        return final_state_from_snapshots(self, run_id)
