"""SPEC §3.7 over generated runs: a null fork with memoize, at any point, makes no model or
tool call and reproduces its base exactly; every log folds to the state its runner held."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points
from tests.engine.properties.graphs import Options, graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import (
    assert_fold_matches,
    record_case,
    same_outcome,
    show,
)
from tests.engine.properties.world import Harness

GATES = Options(segments=("single", "diamond", "loop"),
                singles=("tool", "approval", "approval", "agent", "subgraph"))
"""Gates after untrusted tools: a memo hit must write what a live gate writes, taint too."""


@examples(50)
@given(case=st.one_of(graph_cases(), graph_cases(GATES)))
def test_a_null_fork_at_every_point_makes_no_call_and_reproduces_the_base(case: Any) -> None:
    h = Harness()
    base = record_case(case, h)
    assert_fold_matches(base.store, base.state)
    for point in fork_points(base.event_log):
        h.counter.reset()
        sent = len(h.world.sent)

        result = fork(base, at={"sequence": point.seq}, policy={"memoize": True})

        assert h.counter.total == 0, (
            f"null fork at {point.label}: {h.counter.model_calls[:2]} {h.counter.tool_calls}")
        assert len(h.world.sent) == sent
        assert all(c["label"] == "reused" for c in result.calls), (point.label, result.calls)
        assert same_outcome(result.state, base.state), f"{point.label}\n" + show(
            base.state, result.state)
        assert_fold_matches(base.store, result.state)


@examples(30)
@given(case=graph_cases(), data=st.data())
def test_a_null_fork_of_a_fork_at_any_point_of_its_logical_run_reproduces_it(
        case: Any, data: st.DataObject) -> None:
    """Taken where its change has not bitten yet, a fork's inherited prefix is its root's
    unchanged; a null fork anywhere in its logical run then reproduces it without a call. (At
    an inherited point the change is re-applied from there: semantics "Forks of forks".)"""
    from tests.engine.properties.changes import changes, first_affected

    h = Harness()
    base = record_case(case, h)
    item = data.draw(changes(case.graph, base.state,
                             kinds=("model", "prompt", "memory", "output", "tool")), label="change")
    bite = first_affected(item, case.graph, base.state)
    points = [p for p in fork_points(base.event_log) if bite is None or p.seq < bite.start_seq]
    point = data.draw(st.sampled_from(points), label="point")
    first = fork(base, at={"sequence": point.seq}, change=item, ignore_budget=True,
                 policy={"side_effects": {"allow": True}}, hitl=None)
    if not first.state.finished:
        return
    for again_at in _logical_points(first.state):
        h.counter.reset()

        again = fork(first.run_id, store=base.store, env=h.env, at=again_at,
                     policy={"memoize": True})

        assert h.counter.total == 0, (again_at, h.counter.model_calls, h.counter.tool_calls)
        # an inherited point re-applies the parent's change: its substitutions are simulated
        assert all(c["label"] in ("reused", "simulated") for c in again.calls), (
            again_at, again.calls)
        assert same_outcome(again.state, first.state), f"{again_at}\n" + show(
            first.state, again.state)
        assert_fold_matches(base.store, again.state)


def _logical_points(state: Any) -> list[Any]:
    """Every node boundary of a run's logical run, addressed by name (start, before:N#k)."""
    return ["start"] + [{"before_node": e.node, "occurrence": e.occurrence}
                        for e in state.executions[1:]]
