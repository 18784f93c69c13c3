"""Errors name the real cause (issue 8 point 8).

Any address resolving behind a compaction boundary names the earliest forkable point; an
archived run, with or without a snapshot, is ``source_missing`` whenever the point needs its
events; a case with no criteria cannot fail and says so.
"""

from __future__ import annotations

import pytest

from forklab.engine import change, fork, run_case, save_case
from forklab.engine.errors import ForkPointNotFound, SourceMissing
from forklab.engine.reducers import fold
from tests.engine.fork.helpers import record

# review-loop boundaries: 1 draft, 6 review, 11 gate, 14 revise, 19 review#2, 24 gate#2,
# 27 revise#2, 32 review#3, 37 gate#3, 40 end


def _compacted(upto: int):
    base = record("review-loop")
    base.store.save_snapshot(base.run_id, fold(base.store.read(base.run_id, upto=upto)))
    base.store.compact(base.run_id, upto)
    return base


@pytest.mark.parametrize("at", [
    {"before_iteration": 1},
    {"before_first_write_of": "verdict"},
    {"before_first_read_of": "draft"},
    {"after_node": "draft"},
    {"after_node": "review"},
    "iteration:2",
    "first-read:verdict",
])
def test_every_named_form_behind_the_compaction_boundary_names_the_earliest_point(at) -> None:
    base = _compacted(21)

    with pytest.raises(ForkPointNotFound) as raised:
        fork(base, at=at, dry_run=True)

    assert raised.value.context["earliest_forkable"] == 24
    assert "earliest forkable point is seq 24" in raised.value.message
    assert "compaction boundary" in raised.value.message


def test_a_named_form_past_the_compaction_boundary_still_resolves() -> None:
    base = _compacted(21)

    result = fork(base, at={"after_node": "review", "occurrence": 2}, dry_run=True)

    assert (result.point.seq, result.point.node) == (24, "gate")


def test_an_archived_run_with_a_final_snapshot_is_source_missing_for_an_event_point() -> None:
    base = record("research-write")
    base.store.save_snapshot(base.run_id, base.state)
    base.store.archive(base.run_id)

    for at in ({"before_node": "write"}, "start", {"sequence": 6}):
        with pytest.raises(SourceMissing) as raised:
            fork(base, at=at, dry_run=True)
        assert raised.value.code == "source_missing"
        assert "archived" in raised.value.message


def test_an_archived_run_with_a_mid_run_snapshot_is_source_missing_not_in_progress() -> None:
    base = record("research-write")
    base.store.save_snapshot(base.run_id, fold(base.store.read(base.run_id, upto=6)))
    base.store.archive(base.run_id)

    with pytest.raises(SourceMissing) as raised:
        fork(base, at={"before_node": "write"}, change=change.prompt("write", "x"))

    assert raised.value.code == "source_missing"


def test_an_archived_run_with_a_final_snapshot_still_forks_from_that_snapshot() -> None:
    base = record("research-write")
    base.store.save_snapshot(base.run_id, fold(base.store.read(base.run_id, upto=6)))
    base.store.save_snapshot(base.run_id, base.state)
    base.store.archive(base.run_id)

    result = fork(base, at={"version": 6}, source="snapshot", policy={"memoize": True})

    assert result.state.status == "completed"
    assert result.state.memory == base.state.memory


def test_a_case_with_no_criteria_cannot_fail_and_says_so() -> None:
    base = record("flaky-tool")
    failed = fork(base, at="failure")
    assert failed.state.status == "failed"

    outcome = run_case(save_case(failed.run_id, name="bare", store=base.store))

    assert outcome.passed
    assert outcome.failures == []
    assert "cannot fail" in outcome.note
