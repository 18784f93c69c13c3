"""What is forkable (SPEC §3.8): compaction, snapshots, archived runs, skew, unfinished runs."""

from __future__ import annotations

import dataclasses

import pytest

from forklab.engine import change, fork, fork_points
from forklab.engine.canonical import canonical_equals
from forklab.engine.errors import (
    ForkPointNotFound,
    RunInProgress,
    RunNotFound,
    SourceMissing,
    VersionSkewError,
)
from forklab.engine.events import RunStarted
from forklab.engine.reducers import fold
from forklab.engine.store import MemoryStore
from tests.engine.fork.helpers import record

# review-loop boundaries: 1 draft, 6 review, 11 gate, 14 revise, 19 review#2, 24 gate#2,
# 27 revise#2, 32 review#3, 37 gate#3, 40 end; review#2 runs over seqs 20..24


def _compacted(upto: int):
    base = record("review-loop")
    base.store.save_snapshot(base.run_id, fold(base.store.read(base.run_id, upto=upto)))
    base.store.compact(base.run_id, upto)
    return base


def test_a_point_behind_the_compaction_boundary_names_the_earliest_forkable_point() -> None:
    base = _compacted(21)  # a snapshot taken inside review#2

    with pytest.raises(ForkPointNotFound) as raised:
        fork(base, at={"sequence": 14}, change=change.prompt("revise", "x"))

    assert raised.value.context["earliest_forkable"] == 24
    assert "earliest forkable point is seq 24" in raised.value.message


@pytest.mark.parametrize("at", ["start", {"before_node": "review"},
                                {"before_node": "review", "occurrence": 2}])
def test_node_addresses_behind_the_compaction_boundary_are_refused_not_shifted(at) -> None:
    base = _compacted(21)

    with pytest.raises(ForkPointNotFound) as raised:
        fork(base, at=at, dry_run=True)

    assert raised.value.context["earliest_forkable"] == 24
    assert "seq 24" in raised.value.message


def test_points_after_the_compaction_boundary_still_fork_from_events() -> None:
    base = _compacted(21)

    result = fork(base, at={"before_node": "review", "occurrence": 3},
                  change=change.prompt("review", "Approve."))

    assert result.fork_sequence_id == 32
    assert result.state.status == "completed"
    assert [p.seq for p in fork_points(base.event_log)] == [24, 27, 32, 37, 40]


def test_a_mid_node_snapshot_forks_by_version_and_reruns_that_node() -> None:
    base = _compacted(21)

    result = fork(base, at={"version": 21}, source="snapshot",
                  change=change.prompt("review", "Approve everything."))

    assert result.fork_sequence_id == 21
    assert result.fork_node_id == "review"
    assert result.point.occurrence == 2
    first = result.calls[0]
    assert (first["node"], first["occurrence"], first["label"]) == ("review", 2, "changed")
    assert result.prefix_state.current is None
    assert result.prefix_state.occurrences["review"] == 1
    assert result.state.status == "completed"


def test_a_null_fork_of_a_snapshot_reproduces_the_run() -> None:
    base = _compacted(21)

    result = fork(base, at="version:21", policy={"memoize": True})

    assert {c["label"] for c in result.calls} == {"reused"}
    assert canonical_equals(result.state.memory, base.state.memory)
    assert result.state.status == base.state.status


def test_source_snapshot_needs_a_version_and_an_existing_snapshot() -> None:
    base = _compacted(21)

    with pytest.raises(ForkPointNotFound) as no_version:
        fork(base, at={"before_node": "gate"}, source="snapshot")
    with pytest.raises(ForkPointNotFound) as missing:
        fork(base, at={"version": 20}, source="snapshot")

    assert "pass at={'version': N}" in no_version.value.message
    assert missing.value.context["snapshots"] == [21]


def test_an_archived_run_is_source_missing() -> None:
    base = record("research-write")
    base.store.archive(base.run_id)

    with pytest.raises(SourceMissing) as raised:
        fork(base, at={"before_node": "write"})

    assert raised.value.code == "source_missing"


def test_an_unknown_run_is_not_found() -> None:
    with pytest.raises(RunNotFound):
        fork("no-such-run", store=MemoryStore(), at="start")


def test_a_run_recorded_under_another_replay_version_is_refused() -> None:
    base = record("research-write")
    events = base.store.read(base.run_id)
    skewed = [dataclasses.replace(e, replay_version=0) if isinstance(e, RunStarted) else e
              for e in events]
    store = MemoryStore()
    store.save_graph(base.graph)
    store.append(base.run_id, skewed, expected_seq=0)

    with pytest.raises(VersionSkewError) as raised:
        fork(base.run_id, store=store, env=base.env, at={"before_node": "write"})

    assert raised.value.code == "version_skew"
    assert raised.value.context["recorded"] == 0
    assert "will not approximate" in raised.value.message


def test_an_unfinished_run_is_run_in_progress() -> None:
    paused = record("order-fulfilment", hitl=None)
    assert paused.state.status == "paused"

    with pytest.raises(RunInProgress) as raised:
        fork(paused, at="start")

    assert raised.value.code == "run_in_progress"
    assert raised.value.context["status"] == "paused"


# -- source="auto": events first, then a snapshot that covers the point (issue 35, class 6) --


@pytest.mark.parametrize("at", [{"before_node": "review", "occurrence": 2},
                                {"sequence": 19}, "seq:19"])
def test_auto_forks_a_point_behind_the_boundary_from_the_snapshot_that_covers_it(at) -> None:
    base = _compacted(21)  # the snapshot inside review#2 rewinds to the boundary before it
    by_version = fork(base, at={"version": 21}, source="snapshot",
                      change=change.prompt("review", "Approve everything."))

    result = fork(base, at=at, source="auto", change=change.prompt("review",
                                                                   "Approve everything."))

    assert (result.point.node, result.point.occurrence) == ("review", 2)
    assert result.fork_sequence_id == 21
    assert canonical_equals(result.state.outcome(), by_version.state.outcome())


def test_auto_prefers_events_where_they_are_kept() -> None:
    base = _compacted(21)

    result = fork(base, at={"before_node": "review", "occurrence": 3}, source="auto",
                  policy={"memoize": True})

    assert result.fork_sequence_id == 32
    assert canonical_equals(result.state.outcome(), base.state.outcome())


def test_auto_still_refuses_a_point_no_snapshot_covers_naming_one_that_works() -> None:
    base = _compacted(21)

    with pytest.raises(ForkPointNotFound) as raised:
        fork(base, at="start", source="auto", dry_run=True)

    assert raised.value.context["earliest_forkable"] == 24


# -- what a compacted lineage suggests and lists (issue 35, class 7) ------------------------


def test_a_fork_of_a_compacted_base_names_an_earliest_point_that_forks() -> None:
    base = _compacted(21)
    child = fork(base, at={"before_node": "review", "occurrence": 3},
                 change=change.prompt("review", "Approve."))

    with pytest.raises(ForkPointNotFound) as raised:
        fork(child.run_id, store=base.store, env=base.env, at={"before_node": "revise"},
             dry_run=True)

    context = raised.value.context
    assert (context["earliest_forkable"], context["earliest_forkable_run_id"]) == (
        24, base.run_id)
    assert f"seq:24@{base.run_id}" in raised.value.message
    again = fork(child.run_id, store=base.store, env=base.env,
                 at={"sequence": 24, "run_id": base.run_id}, dry_run=True)
    assert again.fork_sequence_id == 24


def test_fork_points_of_a_fork_of_a_compacted_base_list_only_points_that_fork() -> None:
    base = _compacted(21)
    child = fork(base, at={"before_node": "review", "occurrence": 3},
                 change=change.prompt("review", "Approve."))

    listed = fork_points(base.store.read(child.run_id), store=base.store)

    assert [(p.seq, p.run_id) for p in listed][:2] == [(24, base.run_id), (27, base.run_id)]
    for point in listed:
        fork(child.run_id, store=base.store, env=base.env, at=point.address(), dry_run=True)


def test_fork_points_of_an_archived_run_list_nothing_rather_than_fail() -> None:
    base = record("review-loop")
    base.store.archive(base.run_id)

    assert fork_points(base.store.read(base.run_id), store=base.store) == []
