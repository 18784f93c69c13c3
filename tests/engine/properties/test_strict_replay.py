"""Strict replay of a fork sees graph drift (issue 35, class 4; SPEC §3.8).

A fork's strict replay re-drives its tail through the graph's current version with the
fork's changes applied again. Over generated graphs, changes and points:

- with no new version, the fork replays strictly (the re-applied graph is the recorded one);
- after a new version edits a node the fork's tail executed (and none of its changes sets),
  strict replay raises ``replay_divergence`` naming a node — as the base's replay does.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points, replay
from forklab.engine.errors import ReplayDivergence
from forklab.engine.graph import AgentNode, GraphSpec, ToolNode, parse_graph
from tests.engine.properties.changes import changes, node_of
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import Harness, hitl


def _edited(graph: GraphSpec, node_id: str) -> GraphSpec:
    """A new version of ``graph`` where one agent's template or one tool's params differ."""
    data = graph.to_wire()
    for node in data["nodes"]:
        if node["id"] == node_id and node["kind"] == "tool":
            node["params"] = {**node.get("params", {}), "salt": 99}
        elif node["id"] == node_id:
            node["prompt"] = "Edited since the fork."
    return parse_graph(data)


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_strict_replay_of_a_fork_passes_until_a_node_its_tail_ran_is_edited(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    result = fork(base, at={"sequence": point.seq}, change=item, hitl=hitl,
                  ignore_budget=True, policy={"memoize": data.draw(st.booleans())})
    state = result.state
    assert state is not None and result.run_id is not None
    assume(state.finished)

    assert replay(result.run_id, store=base.store, env=h.env).version == state.version

    touched = {node_of(item)} if item is not None else set()
    ran = [ex.node for ex in state.executions[state.prefix_executions:]
           if isinstance(case.graph.node(ex.node), (AgentNode, ToolNode))
           and ex.node not in touched and ex.kind != "approval"]
    assume(ran)
    node = data.draw(st.sampled_from(sorted(set(ran))), label="edited node")
    base.store.save_graph(_edited(case.graph, node))

    with pytest.raises(ReplayDivergence) as raised:
        replay(result.run_id, store=base.store, env=h.env)

    assert raised.value.context.get("node") is not None, raised.value.message
