"""Invariant 2 — memoize is invisible (issue 8; SPEC §3.4; semantics "Fingerprint").

For any fork, memoize on and off give the same outcome and the same path. The fingerprint a
memo hit is keyed on covers everything a node can observe — its read slice (including which
declared keys are absent), ``$iteration`` and occurrence, its config and every agent it
drives, a subgraph's child input and child graph version — so a recording is only served
where executing the node would have done the same thing. The generated graphs put nodes in
loops whose routers test ``$iteration``, tools whose answer depends on ``ctx.occurrence``,
shared agents, role instances and subgraphs, where a fingerprint that missed any of it
would serve a wrong recording.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points
from tests.engine.properties.changes import changes
from tests.engine.properties.graphs import Options, graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import assert_fold_matches, record_case, same_outcome, show
from tests.engine.properties.world import Harness, hitl


@examples(100)
@given(case=graph_cases(), data=st.data())
def test_memoize_on_and_off_give_the_same_outcome_and_path(case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    side_effects = data.draw(st.sampled_from(["replay", {"allow": True}]), label="side_effects")
    run = {"at": {"sequence": point.seq}, "change": item, "hitl": hitl, "ignore_budget": True}

    on = fork(base, policy={"memoize": True, "side_effects": side_effects}, **run)
    off = fork(base, policy={"memoize": False, "side_effects": side_effects}, **run)

    assert same_outcome(on.state, off.state), (
        f"{item.describe() if item else 'no change'} at {point.label}: memoize on vs off\n"
        + show(on.state, off.state))
    assert_fold_matches(base.store, on.state)
    assert_fold_matches(base.store, off.state)


LOOPS = Options(segments=("loop", "loop", "single"), singles=("tool", "agent", "multi"),
                flaky_tools=False, min_segments=2, max_segments=4)
"""Loops whose bodies read their own last output and whose routers test ``$iteration``: a
fingerprint that forgot the iteration or the occurrence serves another pass's recording."""


@examples(60)
@given(case=graph_cases(LOOPS), data=st.data())
def test_memoize_on_and_off_give_the_same_path_through_loops(case: Any,
                                                            data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state,
                                                  ("output", "tool", "memory", "config"))),
                     label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    run = {"at": {"sequence": point.seq}, "change": item, "hitl": hitl, "ignore_budget": True}

    on = fork(base, policy={"memoize": True}, **run)
    off = fork(base, policy={"memoize": False}, **run)

    assert same_outcome(on.state, off.state), (
        f"{item.describe() if item else 'no change'} at {point.label}: memoize on vs off\n"
        + show(on.state, off.state))


@examples(60)
@given(case=graph_cases(), data=st.data())
def test_a_memo_hit_is_served_only_where_a_base_execution_saw_the_same_fingerprint(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")

    result = fork(base, at={"sequence": point.seq}, change=item, hitl=hitl, ignore_budget=True,
                  policy={"memoize": True})

    recorded = {e.fingerprint: e for e in base.state.executions}
    skip = result.state.prefix_executions
    for ex in result.state.executions[skip:]:
        if ex.memo:
            assert ex.fingerprint in recorded, f"{ex.node}#{ex.occurrence} hit no base execution"
            source = recorded[ex.fingerprint]
            assert source.node == ex.node
            assert ex.writes == source.writes and ex.route == source.route, (
                f"{ex.node}#{ex.occurrence} was served {source.node}#{source.occurrence}'s "
                "output but wrote something else")
