"""Indexed graphs: lookups, the cached fingerprint parts and swapping one node in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forklab.engine import graph as graph_module
from forklab.engine.canonical import fingerprint
from forklab.engine.errors import GraphValidationError, UnboundedCycleError
from forklab.engine.graph import (
    GraphSpec,
    _bulk_fingerprint_parts,
    load_graph,
    parse_graph,
    parse_stored_graph,
)
from forklab.engine.planner import fingerprint_reference, node_fingerprint

SCENARIOS = sorted((Path(__file__).parents[2] / "forklab/engine/scenarios").glob("*.yaml"))


def _graph(**extra: Any) -> GraphSpec:
    return parse_graph({
        "id": "g", "start": "a",
        "nodes": [
            {"id": "a", "kind": "tool", "tool": "t.x", "writes": ["x"]},
            {"id": "b", "kind": "agent", "reads": ["x"], "writes": ["y"], "prompt": "{x}",
             "agent": {"system_prompt": "hi"}},
            {"id": "r", "kind": "router", "reads": ["y"], "default": "end",
             "rules": [{"when": [{"key": "y", "op": "truthy"}], "to": "c"}]},
            {"id": "c", "kind": "tool", "tool": "t.x", "writes": ["z"], "join": "all"},
        ],
        "edges": [{"from": "a", "to": "b"}, {"from": "a", "to": "c"}, {"from": "b", "to": "r"},
                  {"from": "a", "to": "c"}],
        **extra,
    })


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_indexed_lookups_equal_a_scan_of_nodes_and_edges(path: Path) -> None:
    graph = load_graph(path)
    for node in graph.nodes:
        assert graph.node(node.id) is node
        assert graph.successors(node.id) == [e.target for e in graph.edges
                                             if e.source == node.id]
        assert graph.predecessors(node.id) == [e.source for e in graph.edges
                                               if e.target == node.id]


def test_duplicate_edges_are_kept_in_written_order() -> None:
    assert _graph().successors("a") == ["b", "c", "c"]
    assert _graph().predecessors("c") == ["a", "a"]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_node_fingerprint_equals_the_hash_of_the_whole_record(path: Path) -> None:
    graph = load_graph(path)
    for node in graph.nodes:
        reads = {key: {"v": [1, None, "é"], "k": key} for key in node.reads[:1]}
        for child in (None, {"input": {"a": 1}, "graph": "h"}):
            args = {"occurrence": 2, "iteration": 3, "child": child}
            assert (node_fingerprint(graph, node.id, reads, **args)
                    == fingerprint_reference(graph, node.id, reads, **args))


def test_a_node_with_an_inline_agent_has_the_parts_of_the_general_path() -> None:
    from forklab.engine.canonical import canonical_json
    from forklab.engine.graph import node_agents

    graph = parse_graph({
        "id": "inline", "start": "a", "agents": {"named": {"system_prompt": "n"}},
        "nodes": [
            {"id": "a", "kind": "agent", "reads": ["x"], "writes": ["a"], "prompt": "{x}",
             "agent": {"system_prompt": "é", "params": {"k": None, "j": [None, 1]}},
             "description": "not hashed", "choices": ["y", "n"]},
            {"id": "b", "kind": "agent", "reads": ["a"], "writes": ["b"], "agent": "named"},
            {"id": "c", "kind": "router", "reads": ["a"], "agent": {"system_prompt": "r"},
             "choices": {"y": "b", "n": "b"}},
            {"id": "d", "kind": "router", "reads": ["a"], "default": "b",
             "rules": [{"when": [{"key": "a", "op": "eq", "value": "y"}], "to": "b"}]},
        ],
        "edges": [{"from": "a", "to": "c"}, {"from": "a", "to": "d"}],
    })
    for node in graph.nodes:
        config = canonical_json(node.model_dump(mode="json", exclude={"description"}))
        agents = canonical_json(node_agents(graph, node))
        assert tuple(graph.fingerprint_parts(node.id)) == (config, agents), node.id


@pytest.mark.parametrize("known", ["none", "some", "all"])
def test_swapping_a_node_in_equals_parsing_the_changed_graph(
        known: str, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = _graph()
    monkeypatch.setattr(graph_module, "PER_NODE_FIRST", 1)
    for node in graph.nodes[:{"none": 0, "some": 1, "all": len(graph.nodes)}[known]]:
        graph.fingerprint_parts(node.id)  # what the swapped graph inherits: none, one, all
    data = graph.to_wire()
    data["nodes"][1]["agent"]["system_prompt"] = "changed"
    swapped = graph.with_node(data["nodes"][1])
    assert swapped.to_wire() == parse_graph(data).to_wire()
    assert swapped.content_hash == parse_graph(data).content_hash != graph.content_hash
    assert swapped.node("b").agent.system_prompt == "changed"  # type: ignore[union-attr]
    assert graph.node("b").agent.system_prompt == "hi"  # type: ignore[union-attr]
    assert (node_fingerprint(swapped, "b", {"x": 1}, occurrence=1, iteration=1)
            == fingerprint_reference(parse_graph(data), "b", {"x": 1}, occurrence=1,
                                     iteration=1))


def test_a_swapped_node_is_validated_against_the_graph() -> None:
    graph = _graph()
    bad_prompt = {**graph.to_wire()["nodes"][1], "prompt": "{secret}"}
    with pytest.raises(GraphValidationError, match=r"placeholder \{secret\} is not in 'reads'"):
        graph.with_node(bad_prompt)
    bad_target = {**graph.to_wire()["nodes"][2], "default": "nowhere"}
    with pytest.raises(GraphValidationError, match="unknown node 'nowhere'"):
        graph.with_node(bad_target)
    with pytest.raises(GraphValidationError, match="temperature"):
        graph.with_node({**graph.to_wire()["nodes"][1], "agent": {"temperature": 9}})
    with pytest.raises(GraphValidationError, match="keeps the kind"):
        graph.with_node({"id": "a", "kind": "approval"})


def test_a_swapped_router_closing_an_unbounded_loop_is_refused() -> None:
    loop = {**_graph().to_wire()["nodes"][2], "default": "a"}
    with pytest.raises(UnboundedCycleError, match="max_iterations"):
        _graph().with_node(loop)
    assert _graph(max_iterations=3).with_node(loop).node("r").default == "a"  # type: ignore


def test_a_copy_with_other_fields_drops_the_cached_lookups() -> None:
    graph = _graph()
    assert graph.has_node("c")
    copied = graph.model_copy(update={"nodes": graph.nodes[:3], "edges": graph.edges[:1]})
    assert not copied.has_node("c")
    assert copied.content_hash != graph.content_hash


def test_a_stored_graph_is_parsed_once_per_content() -> None:
    text = '{"id": "once", "start": "a", "nodes": [{"id": "a", "kind": "tool", "tool": "t.x"}]}'
    first = parse_stored_graph(text)
    assert parse_stored_graph(text) is first
    assert parse_stored_graph(first.to_wire()) == first


def _reference_parts(graph: GraphSpec, node: Any) -> tuple[str, str]:
    from forklab.engine.canonical import canonical_json
    from forklab.engine.graph import node_agents

    return (canonical_json(node.model_dump(mode="json", exclude={"description"})),
            canonical_json(node_agents(graph, node)))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_the_parts_computed_for_the_whole_graph_equal_the_per_node_ones(path: Path) -> None:
    graph = load_graph(path)
    for node in graph.nodes:
        assert tuple(graph.fingerprint_parts(node.id)) == _reference_parts(graph, node), node.id


def test_the_one_pass_leaves_nulls_registry_agents_and_roles_to_the_per_node_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    graph = parse_graph({
        "id": "bulk", "start": "t", "agents": {"named": {"system_prompt": "n"}},
        "nodes": [
            {"id": "t", "kind": "tool", "tool": "t.x", "params": {"k": None, "s": "null"},
             "writes": ["t"]},
            {"id": "u", "kind": "tool", "tool": "t.x", "params": {"n": [1, 2.5, "é\n"]},
             "writes": ["u"], "description": "dropped"},
            {"id": "p", "kind": "agent", "reads": ["t"], "writes": ["p"],
             "agent": {"system_prompt": "p", "params": {"k": None}}},
            {"id": "q", "kind": "agent", "reads": ["t"], "writes": ["q"], "prompt": "{t}",
             "agent": {"system_prompt": "q\u2028\"", "params": {"j": [1, {"x": True}]}}},
            {"id": "n", "kind": "agent", "reads": ["t"], "writes": ["n"], "agent": "named"},
            {"id": "r", "kind": "router", "reads": ["q"], "default": "end",
             "rules": [{"when": [{"key": "q", "op": "eq", "value": None}], "to": "end"}]},
        ],
        "edges": [{"from": "t", "to": "u"}, {"from": "u", "to": "p"}, {"from": "p", "to": "q"},
                  {"from": "q", "to": "n"}, {"from": "n", "to": "r"}],
    })
    bulk = _bulk_fingerprint_parts(graph)
    assert {"u", "q"} <= set(bulk) and not {"t", "p", "n"} & set(bulk)
    for per_node_first in (0, 1, 3, 100):  # the one pass after none, some or every node
        monkeypatch.setattr(graph_module, "PER_NODE_FIRST", per_node_first)
        fresh = parse_graph(graph.to_wire())
        for node in [*fresh.nodes[3:], *fresh.nodes[:3]]:
            assert tuple(fresh.fingerprint_parts(node.id)) == _reference_parts(fresh, node), \
                (per_node_first, node.id)
        assert fresh._fingerprint_parts.complete == (per_node_first < len(fresh.nodes))


@pytest.mark.parametrize("odd", [None, {"n": 1e-05}, {"n": 2**70}, {"n": 0.00001, "m": 1.5}])
def test_the_one_pass_writes_the_per_node_texts_whether_or_not_its_dump_checks_once(
        odd: dict[str, Any] | None) -> None:
    """The pass checks the whole dump's orjson text once and then writes each node's parts
    unchecked; a dump that fails the check (a float orjson writes otherwise, a wide
    integer) takes the checked path per node. The texts are the per-node ones either way."""
    nodes: list[dict[str, Any]] = [{"id": "fan", "kind": "tool", "tool": "t.x", "writes": ["f"],
                                    "description": "left out of the fingerprint"}]
    for i in range(40):
        nodes.append({"id": f"w{i}", "kind": "agent", "reads": ["f"], "writes": [f"w{i}"],
                      "prompt": "{f} é\u2028\"" * (i % 3), "description": "d" * (i % 2),
                      "agent": {"system_prompt": f"worker {i} \U0001f600", "temperature": i / 21,
                                "params": {"k": [i, 2.5, {"z": "e-5", "a": True}]}}})
    if odd is not None:
        nodes[20]["agent"]["params"] = odd
    graph = parse_graph({"id": "checked", "start": "fan", "nodes": nodes,
                         "edges": [{"from": "fan", "to": f"w{i}"} for i in range(40)]})
    bulk = _bulk_fingerprint_parts(graph)
    assert len(bulk) == len(nodes)
    for node in graph.nodes:
        assert tuple(bulk[node.id]) == _reference_parts(graph, node), node.id
    # the pass first (a fork tail's first prediction, made before its opening is built):
    # the hash starts from the pass's dump of the nodes, and takes it
    assert "_nodes_dump" in graph.__dict__
    assert graph.content_hash == fingerprint(graph.to_wire())
    assert "_nodes_dump" not in graph.__dict__
    # hashed first (a fork's graph): the pass starts from the hash's dump of the nodes
    hashed = parse_graph(graph.to_wire())
    assert hashed.content_hash == graph.content_hash
    assert ("_nodes_dump" in hashed.__dict__) == (odd is None or 2**70 not in odd.values())
    from_hash = _bulk_fingerprint_parts(hashed)
    assert "_nodes_dump" not in hashed.__dict__  # taken by the pass, not kept
    assert from_hash == bulk
