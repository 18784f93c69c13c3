"""A fork's result as ``fork`` returns it equals the one ``load_fork_result`` rebuilds from
the two logs — for generated graphs, changes and points, memoize on or off, forks of forks
included — so a worker may store the result it holds instead of reading both logs again."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points
from forklab.engine.fork.result import load_fork_result
from tests.engine.properties.changes import changes
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import Harness, hitl


def same_result(held: Any, store: Any, env: Any) -> None:
    rebuilt = load_fork_result(held.run_id, store=store, env=env)
    assert rebuilt.wire_model() == held.wire_model()
    assert rebuilt.base_state.version == held.base_state.version


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_the_result_a_fork_returns_is_the_one_its_logs_rebuild(case: Any,
                                                              data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    memoize = data.draw(st.booleans(), label="memoize")
    first = fork(base, at={"sequence": point.seq}, change=item, hitl=hitl, ignore_budget=True,
                 policy={"memoize": memoize}, env=h.env)
    same_result(first, base.store, h.env)

    if first.state is None or not first.state.finished:
        return
    again = data.draw(st.sampled_from(fork_points(first.event_log)), label="point of the fork")
    second = fork(first.run_id, at=f"seq:{again.seq}@{again.run_id}", store=base.store, env=h.env,
                  hitl=hitl, ignore_budget=True, policy={"memoize": memoize})
    same_result(second, base.store, h.env)
