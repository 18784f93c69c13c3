"""Invariant 8 — errors name the real cause (SPEC §3.2, §3.8, §3.9; semantics "Errors").

A node or seq behind the compaction boundary names the earliest forkable point; an archived
run — with or without a snapshot — is ``source_missing``, never ``run_in_progress`` or
``fork_point_not_found``; a case with no criteria passes and says it cannot fail.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points, run_case, save_case
from forklab.engine.errors import ForklabError, ForkPointNotFound
from forklab.engine.reducers import fold
from tests.engine.properties.changes import changes
from tests.engine.properties.graphs import SEGMENTS, Options, graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import Harness, hitl


def _compact(base: Any, boundary: int) -> None:
    base.store.save_snapshot(base.run_id, fold(base.store.read(base.run_id, upto=boundary)))
    base.store.compact(base.run_id, boundary)


def _named_forms(ex: Any) -> list[Any]:
    forms: list[Any] = [{"before_node": ex.node, "occurrence": ex.occurrence},
                        {"sequence": ex.start_seq - 1}]
    if ex.status == "completed":
        forms.append({"after_node": ex.node, "occurrence": ex.occurrence})
    return forms


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_a_point_behind_the_compaction_boundary_names_the_earliest_forkable_point(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    points = fork_points(base.event_log)
    assume(len(points) > 2)
    boundary = data.draw(st.sampled_from(points[1:-1]), label="boundary")
    behind = [e for e in base.state.executions if e.start_seq <= boundary.seq]
    ex = data.draw(st.sampled_from(behind), label="behind")
    at = data.draw(st.sampled_from([*_named_forms(ex), "start"]), label="at")
    if isinstance(at, dict) and "after_node" in at:  # the boundary itself is forkable
        assume(ex.end_seq < boundary.seq)
    _compact(base, boundary.seq)

    with pytest.raises(ForkPointNotFound) as refused:
        fork(base.run_id, store=base.store, env=h.env, at=at)

    error = refused.value
    assert error.context.get("earliest_forkable") == boundary.seq, error.to_dict()
    assert re.search(rf"\bseq {boundary.seq}\b", error.message), error.message
    fork(base.run_id, store=base.store, env=h.env, at={"sequence": boundary.seq}, hitl=hitl,
         policy={"memoize": True})  # and that point does fork


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_an_archived_run_is_source_missing_with_or_without_a_snapshot(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    points = fork_points(base.event_log)
    snapshot = data.draw(st.sampled_from(["none", "final", "inside"]), label="snapshot")
    if snapshot == "final":
        base.store.save_snapshot(base.run_id, base.state)
    elif snapshot == "inside":
        seq = data.draw(st.integers(1, base.state.version - 1), label="snapshot at")
        base.store.save_snapshot(base.run_id, fold(base.store.read(base.run_id, upto=seq)))
    ex = data.draw(st.sampled_from(base.state.executions), label="execution")
    at = data.draw(st.sampled_from([*_named_forms(ex), "start", {"sequence": points[-1].seq}]
                                   + (["failure"] if base.state.status == "failed" else [])),
                   label="at")
    base.store.archive(base.run_id)

    with pytest.raises(ForklabError) as refused:
        fork(base.run_id, store=base.store, env=h.env, at=at, hitl=hitl)

    assert refused.value.code == "source_missing", refused.value.to_dict()


@examples(30)
@given(case=graph_cases(), data=st.data())
def test_a_case_with_no_criteria_passes_and_says_it_cannot_fail(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(changes(case.graph, base.state), label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    result = fork(base, at={"sequence": point.seq}, change=item, hitl=hitl, ignore_budget=True)
    assume(result.state.finished)

    outcome = run_case(save_case(result.run_id, name="no criteria", store=base.store))

    assert outcome.passed, (result.state.status, outcome.failures)
    assert "cannot fail" in outcome.note, outcome.note


BRANCHY = Options(segments=(*SEGMENTS, "branch", "branch"))
"""Branches three times as likely as in the default mix: the property needs a node the run
never reached (a branch not taken, a gate, a failure), and a graph where every node ran is
generated and recorded only to be thrown away (about 2 in 3 with the default mix)."""


@examples(30)
@given(case=graph_cases(BRANCHY), data=st.data())
def test_a_node_that_never_ran_is_named_with_the_nodes_that_did(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    ran = {e.node for e in base.state.executions}
    missing = sorted(set(case.graph.node_ids()) - ran)
    assume(missing)
    node = data.draw(st.sampled_from(missing), label="node")

    with pytest.raises(ForkPointNotFound) as refused:
        fork(base, at={"before_node": node})

    assert node in refused.value.message
    assert all(other in refused.value.message for other in ran), refused.value.message
