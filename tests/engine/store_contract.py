"""The store contract: one suite every Store implementation must pass.

Subclass :class:`StoreContract` and implement ``make_store`` (see ``test_memory_store.py``;
the SQLite and Django stores subclass it the same way). Tests are plain methods so the same
assertions run against every backend.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from forklab.engine.canonical import canonical_equals
from forklab.engine.errors import EventGapError, GraphNotFound, SeqConflictError
from forklab.engine.events import MemoryWritten, RunStarted
from forklab.engine.graph import parse_graph
from forklab.engine.recording import run_recorded
from forklab.engine.reducers import fold
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.store import Store

GRAPH = {
    "id": "contract",
    "start": "a",
    "nodes": [{"id": "a", "kind": "agent", "agent": {"model": "scripted-small"},
               "reads": ["goal"], "writes": ["out"], "prompt": "Do {goal}"}],
}


def started(run_id: str = "r1", seq: int = 1) -> RunStarted:
    return RunStarted(run_id=run_id, seq=seq, at=1.0, graph_id="g", graph_version=1,
                      graph_hash="h", input={"goal": "x"}, start="a")


def written(run_id: str, seq: int, key: str = "k", value: Any = 1) -> MemoryWritten:
    return MemoryWritten(run_id=run_id, seq=seq, at=float(seq), key=key, value=value)


def fork_before_last_node(store: Store) -> tuple[str, str]:
    """A research-write run recorded into ``store`` and a fork of it before its last node
    (its prompt changed, memoized): their run ids."""
    from forklab.engine import change, fork

    recorded = run_recorded(SCENARIOS["research-write"].graph(),
                            SCENARIOS["research-write"].input, store=store)
    last = recorded.state.executions[-1].node
    result = fork(recorded.run_id, store=store, at={"before_node": last},
                  change=change.prompt(last, "Say it differently."),
                  policy={"memoize": True})
    assert result.state.status == "completed"
    return recorded.run_id, result.run_id


class StoreContract:
    def make_store(self) -> Store:
        raise NotImplementedError  # pragma: no cover - subclasses provide the backend

    def thread_done(self) -> None:
        """Called at the end of a thread that used the store (a Django store closes that
        thread's database connections, which Django itself never closes)."""

    @pytest.fixture
    def store(self) -> Store:
        return self.make_store()

    # -- append / read ---------------------------------------------------------------------
    def test_append_then_read_returns_events_in_order(self, store: Store) -> None:
        store.append("r1", [started(), written("r1", 2), written("r1", 3)], expected_seq=0)
        events = store.read("r1")
        assert [e.seq for e in events] == [1, 2, 3]
        assert [e.type for e in events] == ["run.started", "memory.written", "memory.written"]
        assert store.last_seq("r1") == 3

    def test_events_round_trip_canonically(self, store: Store) -> None:
        event = written("r1", 2, "nested", {"b": [1, {"z": None, "a": "é"}], "a": 2.5})
        store.append("r1", [started(), event], expected_seq=0)
        assert canonical_equals(store.read("r1")[1].to_wire(), event.to_wire())

    def test_values_json_spells_apart_read_back_exactly(self, store: Store) -> None:
        """Integers wider than 64 bits, floats the json module writes with an exponent, key
        order, escapes and empty containers: the fast JSON paths of the stores must read
        each back as the json module would."""
        value = {"wide": 2**70, "neg": -(2**64) - 1, "tiny": 1e-05, "big": 1e16, "neg0": -0.0,
                 "z": {}, "a": [], "quote": '"\\\n\t', "emoji": "ok \U0001f600", "n": None,
                 "digits": "12345678901234567890123", "nested": [[2**65, 0.1], {"b": 1, "a": 2}]}
        store.append("r1", [started(), written("r1", 2, "odd", value)], expected_seq=0)
        back = store.read("r1")[1]
        assert isinstance(back, MemoryWritten)
        assert back.value == value
        assert type(back.value["wide"]) is int and type(back.value["tiny"]) is float
        if not self.reorders_keys:
            assert list(back.value) == list(value)
            assert list(back.value["nested"][1]) == ["b", "a"]

    reorders_keys = False  # PostgreSQL's jsonb keeps no key order

    def test_read_after_and_upto_bound_the_range(self, store: Store) -> None:
        store.append("r1", [started()] + [written("r1", s) for s in range(2, 8)], expected_seq=0)
        assert [e.seq for e in store.read("r1", after=3)] == [4, 5, 6, 7]
        assert [e.seq for e in store.read("r1", after=2, upto=5)] == [3, 4, 5]
        assert store.read("r1", after=7) == []

    def test_an_empty_append_makes_no_run(self, store: Store) -> None:
        store.append("r1", [], expected_seq=0)
        store.append("r2", [started("r2")], expected_seq=0)
        store.append("r1", [started()], expected_seq=0)
        assert store.run_ids() == ["r2", "r1"]  # oldest first: r1 began with its event

    def test_bounds_far_past_a_log_stay_inside_its_run(self, store: Store) -> None:
        store.append("r1", [started(), written("r1", 2)], expected_seq=0)
        store.append("r2", [started("r2"), written("r2", 2)], expected_seq=0)
        assert store.read("r1", after=2**40) == []
        assert [(e.run_id, e.seq) for e in store.read("r1", upto=2**40)] == [("r1", 1), ("r1", 2)]
        assert [e.seq for e in store.read("r2", after=-3, upto=1)] == [1]

    def test_append_refuses_a_stale_expected_seq(self, store: Store) -> None:
        store.append("r1", [started()], expected_seq=0)
        with pytest.raises(SeqConflictError) as info:
            store.append("r1", [written("r1", 2)], expected_seq=0)
        assert info.value.code == "seq_conflict"
        assert store.last_seq("r1") == 1

    def test_append_refuses_a_gap_and_keeps_nothing_of_the_batch(self, store: Store) -> None:
        store.append("r1", [started()], expected_seq=0)
        with pytest.raises(EventGapError) as info:
            store.append("r1", [written("r1", 2), written("r1", 4)], expected_seq=1)
        assert info.value.code == "event_gap"
        assert store.last_seq("r1") == 1

    def test_append_refuses_events_of_another_run(self, store: Store) -> None:
        with pytest.raises(EventGapError):
            store.append("r1", [started("r2")], expected_seq=0)

    def test_unknown_run_reads_empty(self, store: Store) -> None:
        assert store.read("nope") == []
        assert store.last_seq("nope") == 0

    def test_runs_are_independent_and_listed(self, store: Store) -> None:
        store.append("r1", [started("r1")], expected_seq=0)
        store.append("r2", [started("r2"), written("r2", 2)], expected_seq=0)
        assert set(store.run_ids()) >= {"r1", "r2"}
        assert store.last_seq("r1") == 1 and store.last_seq("r2") == 2

    def test_concurrent_appenders_never_both_win(self, store: Store) -> None:
        store.append("r1", [started()], expected_seq=0)
        outcomes: list[str] = []

        def attempt(value: int) -> None:
            try:
                store.append("r1", [written("r1", 2, value=value)], expected_seq=1)
                outcomes.append("ok")
            except SeqConflictError:
                outcomes.append("conflict")
            finally:
                self.thread_done()

        threads = [threading.Thread(target=attempt, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert outcomes.count("ok") == 1
        assert store.last_seq("r1") == 2

    # -- graphs ----------------------------------------------------------------------------
    def test_saving_the_same_graph_twice_keeps_one_version(self, store: Store) -> None:
        graph = parse_graph(GRAPH)
        assert store.save_graph(graph) == 1
        assert store.save_graph(graph) == 1
        assert store.graph_versions("contract") == [1]

    def test_a_changed_graph_gets_a_new_version(self, store: Store) -> None:
        store.save_graph(parse_graph(GRAPH))
        changed = parse_graph({**GRAPH, "description": "changed"})
        assert store.save_graph(changed) == 2
        assert store.load_graph("contract", 1).description == ""
        assert store.load_graph("contract").description == "changed"

    def test_loading_an_unknown_graph_raises_not_found(self, store: Store) -> None:
        with pytest.raises(GraphNotFound):
            store.load_graph("missing")
        store.save_graph(parse_graph(GRAPH))
        with pytest.raises(GraphNotFound):
            store.load_graph("contract", 9)

    # -- snapshots, compaction, retention --------------------------------------------------
    def test_snapshot_round_trip_and_compaction(self, store: Store) -> None:
        recorded = run_recorded(SCENARIOS["research-write"].graph(),
                                SCENARIOS["research-write"].input, store=store)
        events = store.read(recorded.run_id)
        mid = fold(events[:5])
        store.save_snapshot(recorded.run_id, mid)
        loaded = store.load_snapshot(recorded.run_id, 5)
        assert loaded is not None and canonical_equals(loaded.to_wire(), mid.to_wire())
        store.compact(recorded.run_id, 5)
        assert store.first_seq(recorded.run_id) == 6
        assert store.last_seq(recorded.run_id) == recorded.state.version
        rest = store.read(recorded.run_id)
        assert rest[0].seq == 6
        rebuilt = fold(rest, store.load_snapshot(recorded.run_id))
        assert canonical_equals(rebuilt.to_wire(), recorded.state.to_wire())
        assert store.snapshot_versions(recorded.run_id) == [5]

    def test_archive_drops_every_event_but_keeps_last_seq(self, store: Store) -> None:
        store.append("r1", [started(), written("r1", 2)], expected_seq=0)
        store.archive("r1")
        assert store.read("r1") == []
        assert store.first_seq("r1") == 0
        assert store.last_seq("r1") == 2
        with pytest.raises(SeqConflictError):  # the run is not new again
            store.append("r1", [started()], expected_seq=0)

    def test_a_finished_runs_stored_final_state_is_what_its_log_folds_to(
        self, store: Store
    ) -> None:
        recorded = run_recorded(SCENARIOS["diamond"].graph(), SCENARIOS["diamond"].input,
                                store=store)
        folded = fold(store.read(recorded.run_id))
        stored = store.load_final_state(recorded.run_id)
        if stored is None:  # a store that keeps no projection: a final snapshot serves
            store.save_snapshot(recorded.run_id, folded)
            stored = store.load_final_state(recorded.run_id)
        assert stored is not None and canonical_equals(stored.to_wire(), folded.to_wire())

    def test_an_unfinished_run_has_no_final_state(self, store: Store) -> None:
        store.append("r1", [started(), written("r1", 2)], expected_seq=0)
        store.save_snapshot("r1", fold(store.read("r1")))
        assert store.load_final_state("r1") is None

    # -- a whole recorded run --------------------------------------------------------------
    @pytest.mark.parametrize("name", sorted(SCENARIOS))
    def test_recorded_scenario_folds_back_to_its_final_state(self, store: Store, name: str) -> None:
        from forklab.engine.oracle import HumanAnswer

        scenario = SCENARIOS[name]
        hitl = (lambda q: HumanAnswer(decision="approved")) if scenario.hitl_decision else None
        recorded = run_recorded(scenario.graph(), scenario.input, store=store, hitl=hitl)
        assert canonical_equals(fold(store.read(recorded.run_id)).to_wire(),
                                recorded.state.to_wire())

    # -- forks and their base ----------------------------------------------------------------
    def test_a_forks_log_reads_back_its_whole_prefix(self, store: Store) -> None:
        from forklab.engine.fork.lineage import forked_event

        base_id, fork_id = fork_before_last_node(store)
        forked = forked_event(store.read(fork_id))
        assert forked is not None and forked.prefix_ref["run_id"] == base_id
        point = forked.prefix_ref["seq"]
        assert canonical_equals(forked.prefix_state,
                                fold(store.read(base_id, upto=point)).to_wire())

    @pytest.mark.parametrize("retire", ["archive", "compact"])
    def test_a_fork_keeps_its_prefix_when_its_base_is_archived_or_compacted(
        self, store: Store, retire: str
    ) -> None:
        base_id, fork_id = fork_before_last_node(store)
        before = [e.to_wire() for e in store.read(fork_id)]
        folded = fold(store.read(fork_id)).to_wire()
        if retire == "archive":
            store.archive(base_id)
            assert store.read(base_id) == []
        else:
            last = store.last_seq(base_id)
            store.save_snapshot(base_id, fold(store.read(base_id)))
            store.compact(base_id, last)
        after = store.read(fork_id)
        assert canonical_equals([e.to_wire() for e in after], before)
        assert canonical_equals(fold(after).to_wire(), folded)

    def test_a_fork_of_a_fork_survives_its_middle_run_being_archived(
        self, store: Store
    ) -> None:
        from forklab.engine import change, fork

        _, fork_id = fork_before_last_node(store)
        node = fold(store.read(fork_id)).executions[-1].node
        second = fork(fork_id, store=store, at={"before_node": node},
                      change=change.prompt(node, "Once more, shorter."), policy={"memoize": True})
        before = fold(store.read(second.run_id)).to_wire()
        store.archive(fork_id)
        assert canonical_equals(fold(store.read(second.run_id)).to_wire(), before)
