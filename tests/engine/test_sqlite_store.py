"""The SQLite store passes the store contract, and keeps what it promises across processes.

Invariants checked beyond the contract: events survive closing and reopening the file, an
event's ``at`` survives exactly (kept in its column only: bodies written with the ISO time
read the same), the file is in WAL mode, and appenders in separate processes never both win
the same seq.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from forklab.engine import sqlite_store
from forklab.engine.canonical import canonical_equals
from forklab.engine.errors import SeqConflictError, StoreRejected, VersionSkewError
from forklab.engine.events import MemoryWritten
from forklab.engine.graph import parse_graph
from forklab.engine.sqlite_store import SqliteStore
from forklab.engine.store import Store
from tests.engine.store_contract import (
    GRAPH,
    StoreContract,
    fork_before_last_node,
    started,
    written,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


class TestSqliteStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _database_file(self, tmp_path: Path) -> Iterator[None]:
        self.path = tmp_path / "forklab.sqlite3"
        self.opened: list[SqliteStore] = []
        yield
        for store in self.opened:
            store.close()

    def make_store(self) -> Store:
        store = SqliteStore(self.path)
        self.opened.append(store)
        return store

    # -- SQLite specifics --------------------------------------------------------------------
    def test_events_graphs_and_snapshots_survive_reopening_the_file(self) -> None:
        from forklab.engine.reducers import fold

        first = self.make_store()
        first.append("r1", [started(), written("r1", 2, value={"a": [1, 2]})], expected_seq=0)
        first.save_graph(parse_graph(GRAPH))
        first.save_snapshot("r1", fold(first.read("r1")))
        first.close()
        second = self.make_store()
        assert [e.to_wire() for e in second.read("r1")] == [
            started().to_wire(), written("r1", 2, value={"a": [1, 2]}).to_wire()]
        assert second.last_seq("r1") == 2
        assert second.graph_versions("contract") == [1]
        assert second.snapshot_versions("r1") == [2]
        assert second.run_ids() == ["r1"]

    def test_a_fork_stores_its_prefix_by_reference_until_its_base_is_archived(self) -> None:
        store = self.make_store()
        base_id, fork_id = fork_before_last_node(store)

        def stored_prefix() -> bool:
            with sqlite3.connect(self.path) as conn:
                (body,) = conn.execute("SELECT body FROM events WHERE run_id = ? AND type = "
                                       "'run.forked'", (fork_id,)).fetchone()
            return "prefix_state" in json.loads(body)["payload"]

        assert not stored_prefix()  # linear storage: the tail, not a second prefix copy
        store.archive(base_id)
        assert stored_prefix()  # copied in before the base's events went

    def test_a_fork_into_a_file_without_its_base_keeps_a_copy(self, tmp_path: Path) -> None:
        from forklab.engine import change, fork
        from forklab.engine.recording import run_recorded
        from forklab.engine.scenarios import SCENARIOS

        recorded = run_recorded(SCENARIOS["diamond"].graph(), SCENARIOS["diamond"].input)
        other = SqliteStore(tmp_path / "other.sqlite3")
        self.opened.append(other)
        last = recorded.state.executions[-1].node
        plan_store = recorded.store
        result = fork(recorded.run_id, store=plan_store, at={"before_node": last},
                      change=change.prompt(last, "Again."), policy={"memoize": True})
        events = plan_store.read(result.run_id)
        other.append(result.run_id, events, expected_seq=0)
        with sqlite3.connect(tmp_path / "other.sqlite3") as conn:
            (body,) = conn.execute("SELECT body FROM events WHERE type = 'run.forked'").fetchone()
        assert "prefix_state" in json.loads(body)["payload"]
        assert canonical_equals([e.to_wire() for e in other.read(result.run_id)],
                                [e.to_wire() for e in events])

    def test_an_events_time_survives_to_the_last_digit(self) -> None:
        store = self.make_store()
        event = MemoryWritten(run_id="r1", seq=2, at=1_767_225_600.123456789, key="k", value=1)
        store.append("r1", [started(), event], expected_seq=0)
        assert store.read("r1")[1].at == event.at

    @pytest.mark.parametrize("at", [0.0, 1_767_225_600.0, 1_767_225_600.123456789, 2.5e9])
    def test_a_body_leaves_its_key_type_and_time_to_the_columns_and_older_bodies_read_the_same(
            self, at: float) -> None:
        store = self.make_store()
        events = [started(), MemoryWritten(run_id="r1", seq=2, at=at, key="k", value=[1.5])]
        store.append("r1", events, expected_seq=0)
        with sqlite3.connect(self.path) as conn:
            bodies = [json.loads(body) for (body,) in conn.execute(
                "SELECT body FROM events WHERE run_id = 'r1' ORDER BY seq")]
            assert bodies == [e.stored_body() for e in events]
            for e in events:  # the stored body is the wire form without the columns' parts
                assert e.untimed_wire() == {"run_id": e.run_id, "seq": e.seq, "type": e.TYPE,
                                            **e.stored_body()}
                assert e.to_wire() == {**e.untimed_wire(), "at": e.to_wire()["at"]}
                assert list(e.to_wire()) == [*e.untimed_wire(), "at"]
            for older in ("to_wire", "untimed_wire"):  # bodies written by earlier code
                conn.executemany(
                    "UPDATE event_rows SET body = ? WHERE key = (SELECT ordinal FROM runs "
                    "WHERE run_id = 'r1') << 32 | ?",
                    [(json.dumps(getattr(e, older)()), e.seq) for e in events])
                conn.commit()
                assert store.read("r1") == events

    def test_the_database_runs_in_wal_mode(self) -> None:
        self.make_store()
        with sqlite3.connect(self.path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    def test_an_idle_store_checkpoints_what_it_appended_once_it_is_enough(self) -> None:
        """``idle`` (a runner waiting on a model call) copies the WAL into the database file
        once IDLE_CHECKPOINT_CHARS of bodies were appended since the last time — not for
        less, when the closing checkpoint is cheap anyway."""
        from forklab.engine import sqlite_store

        store = self.make_store()
        store.append("r1", [started()], expected_seq=0)
        created = self.path.stat().st_size
        store.idle()  # a few bytes appended: nothing to do
        assert self.path.stat().st_size == created
        value = "x" * 4096
        count = sqlite_store.IDLE_CHECKPOINT_CHARS // len(value) + 1
        store.append("r1", [written("r1", seq, value=value) for seq in range(2, count + 2)],
                     expected_seq=1)
        assert self.path.stat().st_size == created  # in the WAL
        store.idle()
        assert self.path.stat().st_size > created + sqlite_store.IDLE_CHECKPOINT_CHARS
        assert [e.seq for e in store.read("r1")] == list(range(1, count + 2))

    def test_appends_stay_in_the_wal_until_the_store_closes(self) -> None:
        """A run's transactions are not checkpointed (two syncs each time) every 1,000 WAL
        pages, SQLite's default, but every WAL_CHECKPOINT_PAGES: 1,500 appends (over 1,000
        pages) leave the database file as created; closing checkpoints them all into it."""
        store = self.make_store()
        store.append("r1", [started()], expected_seq=0)
        created = self.path.stat().st_size
        for seq in range(2, 1502):
            store.append("r1", [written("r1", seq)], expected_seq=seq - 1)
        wal = self.path.with_name(self.path.name + "-wal")
        assert wal.stat().st_size > 1000 * 4096
        assert self.path.stat().st_size == created
        store.close()
        assert not wal.exists()
        with sqlite3.connect(self.path) as conn:
            assert conn.execute("SELECT MAX(seq) FROM events").fetchone()[0] == 1501

    def test_the_same_seq_cannot_be_stored_twice_even_bypassing_the_store(self) -> None:
        store = self.make_store()
        store.append("r1", [started()], expected_seq=0)
        (ordinal,) = sqlite3.connect(self.path).execute(
            "SELECT ordinal FROM runs WHERE run_id = 'r1'").fetchone()
        with sqlite3.connect(self.path) as conn, pytest.raises(sqlite3.IntegrityError):
            conn.execute("INSERT INTO event_rows (key, type, at, body) "
                         "VALUES (?, 'run.started', 0, '{}')", ((ordinal << 32) | 1,))

    def test_a_failed_append_leaves_the_store_usable(self) -> None:
        store = self.make_store()
        store.append("r1", [started()], expected_seq=0)
        with pytest.raises(SeqConflictError):
            store.append("r1", [written("r1", 2)], expected_seq=5)
        store.append("r1", [written("r1", 2)], expected_seq=1)
        assert store.last_seq("r1") == 2

    def test_appenders_in_separate_processes_never_both_win(self) -> None:
        store = self.make_store()
        store.append("r1", [started()], expected_seq=0)
        script = (
            "import sys\n"
            "from forklab.engine.errors import SeqConflictError\n"
            "from forklab.engine.sqlite_store import SqliteStore\n"
            "from tests.engine.store_contract import written\n"
            "store = SqliteStore(sys.argv[1])\n"
            "try:\n"
            "    store.append('r1', [written('r1', 2, value=sys.argv[2])], expected_seq=1)\n"
            "    print('ok')\n"
            "except SeqConflictError:\n"
            "    print('conflict')\n"
        )
        children = [
            subprocess.Popen([sys.executable, "-c", script, str(self.path), str(i)],
                             cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
            for i in range(4)
        ]
        outcomes = [child.communicate(timeout=60)[0].strip() for child in children]
        assert sorted(outcomes) == ["conflict", "conflict", "conflict", "ok"]
        assert store.last_seq("r1") == 2
        assert canonical_equals(store.read("r1")[0].to_wire(), started().to_wire())


class TestForkGraphByReference:
    """A fork's ``run.forked`` row keeps its graph as a stored version plus what differs."""

    def _fork(self, path: Path) -> tuple[SqliteStore, str, str, str]:
        from forklab.engine import change, fork
        from forklab.engine.recording import run_recorded
        from forklab.engine.scenarios import SCENARIOS

        store = SqliteStore(path)
        recorded = run_recorded(SCENARIOS["research-write"].graph(),
                                SCENARIOS["research-write"].input, store=store)
        last = recorded.state.executions[-1].node
        result = fork(recorded.run_id, store=store, at={"before_node": last},
                      change=change.prompt(last, "Say it differently."))
        return store, recorded.run_id, result.run_id, last

    @staticmethod
    def _stored_payload(path: Path, run_id: str) -> dict[str, object]:
        with sqlite3.connect(path) as conn:
            (body,) = conn.execute("SELECT body FROM events WHERE run_id = ? AND type = "
                                   "'run.forked'", (run_id,)).fetchone()
        payload: dict[str, object] = json.loads(body)["payload"]
        return payload

    def test_the_row_keeps_only_the_changed_node_and_reads_back_key_for_key(
            self, tmp_path: Path) -> None:
        from forklab.engine.fork.apply import effective_graph
        from forklab.engine.fork.changes import parse_changes
        from forklab.engine.fork.lineage import forked_event
        from forklab.engine.reducers import fold

        store, base_id, fork_id, last = self._fork(tmp_path / "f.sqlite3")
        payload = self._stored_payload(tmp_path / "f.sqlite3", fork_id)
        assert "graph" not in payload
        graph_delta = payload["graph_delta"]
        assert isinstance(graph_delta, dict) and graph_delta["fields"] == {}
        base = fold(store.read(base_id))
        stored = store.load_graph(base.graph_id, base.graph_version)
        assert list(graph_delta["nodes"]) == [str(stored.index.position[last])]
        forked = forked_event(store.read(fork_id))
        assert forked is not None
        expected = effective_graph(stored, parse_changes(forked.changes)).to_wire()
        assert json.dumps(forked.graph) == json.dumps(expected)
        store.close()

    def test_the_graph_reads_the_same_after_the_base_is_archived(self, tmp_path: Path) -> None:
        store, base_id, fork_id, _ = self._fork(tmp_path / "f.sqlite3")
        before = [json.dumps(e.to_wire()) for e in store.read(fork_id)]
        store.archive(base_id)
        reopened = SqliteStore(tmp_path / "f.sqlite3")  # no cache: rebuilt from the file
        assert [json.dumps(e.to_wire()) for e in reopened.read(fork_id)] == before
        store.close()
        reopened.close()

    def test_a_fork_copied_into_a_file_without_the_graph_keeps_it_whole(
            self, tmp_path: Path) -> None:
        store, _, fork_id, _ = self._fork(tmp_path / "f.sqlite3")
        events = store.read(fork_id)
        other = SqliteStore(tmp_path / "other.sqlite3")
        other.append(fork_id, events, expected_seq=0)
        assert "graph" in self._stored_payload(tmp_path / "other.sqlite3", fork_id)
        assert [e.to_wire() for e in other.read(fork_id)] == [e.to_wire() for e in events]
        store.close()
        other.close()


_FIRST_LAYOUT = """
CREATE TABLE events_first (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, at REAL NOT NULL,
    body TEXT NOT NULL, UNIQUE (run_id, seq)
);
INSERT INTO events_first
    SELECT run_id, seq, type, at, json_set(body, '$.run_id', run_id, '$.seq', seq,
                                           '$.type', type) FROM events
    ORDER BY (SELECT ordinal FROM runs WHERE runs.run_id = events.run_id), seq;
DROP VIEW events;
DROP TABLE event_rows;
ALTER TABLE events_first RENAME TO events;
PRAGMA user_version = 0;
"""
"""Rewrites a file of this layout into the first one (an ``events`` table keyed by run id
and seq, the rows as that layout's code wrote them: bodies holding run id, seq and type)."""


class TestLayout:
    """Files of the first layout are moved to this one when opened, losing nothing; a file of
    a later layout is refused; a run cannot outgrow its keys."""

    @staticmethod
    def _wire(store: SqliteStore) -> dict[str, list[str]]:
        return {run: [json.dumps(e.to_wire()) for e in store.read(run)]
                for run in store.run_ids()}

    def test_a_first_layout_file_is_moved_and_reads_the_same(self, tmp_path: Path) -> None:
        path = tmp_path / "old.sqlite3"
        store = SqliteStore(path)
        base_id, fork_id = fork_before_last_node(store)
        store.append("r1", [started()], expected_seq=0)
        store.append("r2", [started("r2")], expected_seq=0)
        store.append("r1", [written("r1", 2)], expected_seq=1)  # two runs' rows interleave
        before, last = self._wire(store), {run: store.last_seq(run) for run in store.run_ids()}
        store.close()
        with sqlite3.connect(path) as conn:
            conn.executescript(_FIRST_LAYOUT)
            conn.execute("DELETE FROM runs WHERE run_id = 'r2'")  # a run the old code gave no row
            assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] > 0

        moved = SqliteStore(path)
        assert self._wire(moved) == before
        assert moved.run_ids() == [base_id, fork_id, "r1", "r2"]
        assert {run: moved.last_seq(run) for run in moved.run_ids()} == last
        moved.append("r2", [written("r2", 2)], expected_seq=1)
        moved.archive(base_id)  # the fork's prefix by reference still resolves, then is copied
        assert self._wire(moved)[fork_id] == before[fork_id]
        moved.close()
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == sqlite_store.LAYOUT
            tables = {row[0] for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            assert "events_first_layout" not in tables and "events" not in tables
            assert conn.execute("SELECT seq FROM events WHERE run_id = 'r2' ORDER BY seq"
                                ).fetchall() == [(1,), (2,)]
        again = SqliteStore(path)  # opening a moved file changes nothing
        assert self._wire(again)[fork_id] == before[fork_id]
        again.close()

    def test_a_file_of_a_later_layout_is_refused_untouched(self, tmp_path: Path) -> None:
        path = tmp_path / "new.sqlite3"
        SqliteStore(path).close()
        with sqlite3.connect(path) as conn:
            conn.execute(f"PRAGMA user_version = {sqlite_store.LAYOUT + 1}")
        with pytest.raises(VersionSkewError) as raised:
            SqliteStore(path)
        assert raised.value.code == "version_skew"
        assert raised.value.context["recorded"] == sqlite_store.LAYOUT + 1
        assert "newer forklab" in raised.value.message
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == sqlite_store.LAYOUT + 1

    def test_a_run_cannot_reach_past_its_keys(self, tmp_path: Path) -> None:
        store = SqliteStore(tmp_path / "s.sqlite3")
        store.append("r1", [started()], expected_seq=0)
        store.append("r2", [started("r2")], expected_seq=0)
        last = sqlite_store.SEQ_MASK
        with sqlite3.connect(tmp_path / "s.sqlite3") as conn:  # as an archived run keeps it
            conn.execute("UPDATE runs SET last_seq = ? WHERE run_id = 'r1'", (last,))
        store.append("r1", [], expected_seq=last)
        with pytest.raises(StoreRejected) as raised:
            store.append("r1", [written("r1", last + 1)], expected_seq=last)
        assert raised.value.code == "store_rejected"
        assert store.last_seq("r1") == last and [e.seq for e in store.read("r2")] == [1]
        store.close()
