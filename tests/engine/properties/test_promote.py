"""Promote carries exactly what a fork's tail applied (issue 35, class 3; SPEC §3.9).

For a fork of a generated run with config-type changes at any point:

- ``promote`` refuses (``promote_conflict``, ``reason: not_applied``) exactly when one of the
  changes targets a node that ran before the fork point or never ran in the tail;
- ``promote(only_applied=True)`` carries exactly the others, and re-running the promoted
  graph from the start on the fork's input reproduces the fork (status, path, memory).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points, promote
from forklab.engine.canonical import canonical_equals
from forklab.engine.errors import InvalidChange, PromoteConflict
from forklab.engine.recording import run_recorded
from tests.engine.properties.changes import CONFIG_KINDS, changes, node_of
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case, show
from tests.engine.properties.world import Harness, hitl


def _applied(item: Any, state: Any) -> bool:
    node = node_of(item)
    skip = state.prefix_executions
    return (all(ex.node != node for ex in state.executions[:skip])
            and any(ex.node == node for ex in state.executions[skip:]))


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_a_promoted_graph_re_run_reproduces_its_fork_and_carries_only_applied_changes(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    items = data.draw(st.lists(changes(case.graph, base.state, CONFIG_KINDS), min_size=1,
                               max_size=2, unique_by=node_of), label="changes")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    result = fork(base, at={"sequence": point.seq}, change=items, hitl=hitl,
                  ignore_budget=True, policy={"side_effects": {"allow": True}})
    state = result.state
    assert state is not None and result.run_id is not None
    assume(state.status in ("completed", "failed"))
    applied = [c for c in items if _applied(c, state)]

    if len(applied) < len(items):
        with pytest.raises(PromoteConflict) as raised:
            promote(result.run_id, store=base.store)
        assert raised.value.context["reason"] == "not_applied"
    if not applied:
        with pytest.raises(InvalidChange):
            promote(result.run_id, store=base.store, only_applied=True)
        return

    promoted = promote(result.run_id, store=base.store, only_applied=True)

    assert canonical_equals(promoted.promoted, [c.wire() for c in applied])
    graph = base.store.load_graph(case.graph.id, promoted.version)
    rerun = run_recorded(graph, dict(state.input), store=base.store, env=h.env, hitl=hitl)
    assert rerun.state.status == state.status
    assert [e.node for e in rerun.state.executions] == [e.node for e in state.executions]
    assert canonical_equals(rerun.state.memory, state.memory), show(state, rerun.state)
