"""Invariant 3 — nodes see only what they declare (SPEC §1 Memory; semantics "Read slices").

Router rules and subgraph input mappings may use only declared reads (plus ``$iteration``):
the validator refuses anything else with ``invalid_graph`` naming node, field and key. At run
time each node gets only its slice, so a key no node declares can change nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from forklab.engine import change, fork, fork_points
from forklab.engine.actions import ToolCall
from forklab.engine.canonical import canonical_equals
from forklab.engine.errors import GraphValidationError
from forklab.engine.graph import GraphSpec, RouterNode, SubgraphNode, parse_graph
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import run_recorded
from forklab.engine.reducers import fold
from forklab.engine.store import MemoryStore
from tests.engine.properties.graphs import Options, graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import assert_fold_matches, record_case, show
from tests.engine.properties.world import Harness, hitl

WITH_ROUTERS = Options(segments=("branch", "loop", "single"))
WITH_SUBGRAPHS = Options(segments=("single", "branch"), singles=("subgraph", "agent", "tool"))


def _undeclared(graph: GraphSpec, node: Any, draw: Any) -> str:
    """A key the node does not declare: another node's key, an input key, or a new one."""
    known = {k for n in graph.nodes for k in (*n.reads, *n.writes)} | {"i0", "unheard_of"}
    return str(draw(st.sampled_from(sorted(known - set(node.reads) - {"$iteration"}))))


def _refusal(data: dict[str, Any]) -> GraphValidationError:
    with pytest.raises(GraphValidationError) as caught:
        parse_graph(data)
    return caught.value


@examples(40)
@given(case=graph_cases(WITH_ROUTERS), data=st.data())
def test_a_router_rule_over_an_undeclared_key_is_refused_naming_node_field_and_key(
        case: Any, data: st.DataObject) -> None:
    routers = [n for n in case.graph.nodes if isinstance(n, RouterNode) and n.rules]
    assume(routers)
    router = data.draw(st.sampled_from(routers), label="router")
    key = _undeclared(case.graph, router, data.draw)
    wire = copy.deepcopy(case.graph.to_wire())
    node = next(n for n in wire["nodes"] if n["id"] == router.id)
    i = data.draw(st.integers(0, len(node["rules"]) - 1), label="rule")
    node["rules"][i]["when"].append({"key": key, "op": "exists"})

    error = _refusal(wire)

    assert error.code == "invalid_graph"
    assert router.id in error.message and repr(key) in error.message, error.message
    assert "rules" in error.message and "reads" in error.message, error.message


@examples(30)
@given(case=graph_cases(WITH_SUBGRAPHS), data=st.data())
def test_a_subgraph_input_mapping_an_undeclared_key_is_refused_naming_node_field_and_key(
        case: Any, data: st.DataObject) -> None:
    subgraphs = [n for n in case.graph.nodes if isinstance(n, SubgraphNode)]
    assume(subgraphs)
    node = data.draw(st.sampled_from(subgraphs), label="subgraph")
    key = _undeclared(case.graph, node, data.draw)
    wire = copy.deepcopy(case.graph.to_wire())
    next(n for n in wire["nodes"] if n["id"] == node.id)["input"]["c_sneaky"] = key

    error = _refusal(wire)

    assert error.code == "invalid_graph"
    assert node.id in error.message and repr(key) in error.message, error.message
    assert "input" in error.message and "reads" in error.message, error.message


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_setting_a_key_no_node_declares_changes_nothing_but_that_key(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    value = data.draw(st.sampled_from(["red", 7, {"n": 1}]), label="value")
    memoize = data.draw(st.booleans(), label="memoize")
    h.counter.reset()

    result = fork(base, at={"sequence": point.seq}, change=change.memory(set={"unread": value}),
                  policy={"memoize": memoize}, hitl=hitl, ignore_budget=True)

    outcome = copy.deepcopy(result.state.outcome())
    assert canonical_equals(outcome["memory"].pop("unread"), value)
    assert canonical_equals(outcome, base.state.outcome()), show(base.state, result.state)
    if memoize:
        assert h.counter.total == 0, "a key nobody reads made a node execute"
    assert_fold_matches(base.store, result.state)


@examples(40)
@given(case=graph_cases())
def test_every_node_is_handed_exactly_its_declared_slice(case: Any) -> None:
    h = Harness()
    asked: list[dict[str, Any]] = []

    def watching(request: dict[str, Any]) -> HumanAnswer:
        asked.append(request)
        return hitl(request)

    store = MemoryStore()
    for child in case.children:
        store.save_graph(child)
    base = run_recorded(case.graph, dict(case.input), store=store, env=h.env, hitl=watching)

    states = [fold(store.read(run_id)) for run_id in store.run_ids()]
    for state in states:
        graph = case.graph if state.run_id == base.run_id else next(
            c for c in case.children if c.id == state.graph_id)
        for ex in state.executions:
            node = graph.node(ex.node)
            assert set(ex.reads) <= set(node.reads), (ex.node, ex.reads, node.reads)
            for action in ex.actions:
                if isinstance(action, ToolCall):
                    assert set(action.args) <= set(node.params) | set(node.reads), (
                        ex.node, sorted(action.args))
    for request in asked:
        node = case.graph.node(request["node"])
        assert set(request["context"]) <= set(node.reads), request


@examples(30)
@given(case=graph_cases(WITH_ROUTERS), data=st.data())
def test_a_router_that_slipped_past_validation_still_sees_only_its_slice(
        case: Any, data: st.DataObject) -> None:
    """Runtime slicing is not validation's echo: a rule over a key outside the slice (a graph
    built without validation) sees that key as absent, however it is set in memory."""
    routers = [n for n in case.graph.nodes if isinstance(n, RouterNode) and n.rules]
    assume(routers)
    router = data.draw(st.sampled_from(routers), label="router")
    key = data.draw(st.sampled_from(sorted(set(case.input) - set(router.reads))), label="key") \
        if set(case.input) - set(router.reads) else None
    assume(key is not None and not any(key in n.writes for n in case.graph.nodes))
    target = router.default or router.rules[0].to
    rules = [router.rules[0].model_copy(update={
        "when": [router.rules[0].when[0].model_copy(update={"key": key, "op": "exists"})],
        "to": "end"})]
    sneaky = router.model_copy(update={"rules": rules, "default": target})
    graph = case.graph.model_copy(update={"nodes": [sneaky if n.id == router.id else n
                                                    for n in case.graph.nodes]})
    h = Harness()
    store = MemoryStore()
    for child in case.children:
        store.save_graph(child)

    recorded = run_recorded(graph, dict(case.input), store=store, env=h.env, hitl=hitl)

    routes = [e.route for e in recorded.state.executions if e.node == router.id]
    assert all(route == target for route in routes), (
        f"{router.id!r} routed {routes} on {key!r}, which is not in its reads {router.reads}")
