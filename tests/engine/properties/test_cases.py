"""Cases are a regression suite: they run against the graph's current version (issue 35,
class 2; SPEC §3.9).

A case saved from a fork of a generated run, with a criterion on a key one agent node of the
fork's tail writes (and no other node does), passes against the version it was recorded
under; once a new version of the graph makes that node write another key, running the case
against the current version fails and says which version it ran, while naming the old
version still passes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points, save_case
from forklab.engine.fork.lifecycle import run_case_against
from forklab.engine.graph import AgentNode, Condition, GraphSpec, parse_graph
from tests.engine.properties.changes import CONFIG_KINDS, changes
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import Harness, hitl


def _renamed(graph: GraphSpec, node_id: str, key: str) -> GraphSpec:
    data = graph.to_wire()
    for node in data["nodes"]:
        if node["id"] == node_id:
            node["writes"] = [f"{key}_renamed" if k == key else k for k in node["writes"]]
    return parse_graph(data)


def _sole_writers(graph: GraphSpec, state: Any) -> list[tuple[str, str]]:
    """(node, key) for simple agent nodes that ran only in the fork's tail, completed, and
    are the only node of the graph declaring that key in ``writes`` (not an input key)."""
    skip = state.prefix_executions
    prefix = {ex.node for ex in state.executions[:skip]}
    tail = {ex.node for ex in state.executions[skip:] if ex.status == "completed"}
    found = []
    for node in graph.nodes:
        if not isinstance(node, AgentNode) or node.roles or node.id in prefix or node.id not in tail:
            continue
        for key in node.writes:
            if (sum(key in other.writes for other in graph.nodes) == 1 and key in state.memory
                    and key not in state.input):
                found.append((node.id, key))
    return found


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_a_case_fails_against_a_new_version_that_breaks_its_criterion_and_says_which(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state, CONFIG_KINDS)),
                     label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    result = fork(base, at={"sequence": point.seq}, change=item, hitl=hitl,
                  ignore_budget=True, policy={"memoize": data.draw(st.booleans())})
    assert result.state is not None and result.run_id is not None
    assume(result.state.finished)
    writers = _sole_writers(case.graph, result.state)
    assume(writers)
    node, key = data.draw(st.sampled_from(writers), label="edited node and key")
    saved = save_case(result.run_id, name="c", store=base.store,
                      criteria=[Condition(key=key, op="exists")])

    before = run_case_against(saved, store=base.store)
    assert before.passed and before.graph_version == 1, before.failures
    base.store.save_graph(_renamed(case.graph, node, key))

    after = run_case_against(saved, store=base.store)
    named = run_case_against(saved, store=base.store, version=1)

    assert not after.passed and after.graph_version == 2, (
        f"{node!r} no longer writes {key!r} in version 2, yet the case passed")
    assert named.passed and named.graph_version == 1, named.failures
