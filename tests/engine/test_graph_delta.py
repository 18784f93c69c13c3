"""A fork's graph stored as a stored version plus what differs rebuilds key for key."""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from forklab.engine.graph_delta import StoredVersion, apply_delta, delta
from forklab.engine.scenarios import SCENARIOS


def _stored() -> dict[str, Any]:
    return SCENARIOS["research-write"].graph().to_wire()


def _round_trip(graph: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any] | None:
    change = delta(graph, StoredVersion(stored), graph_id=stored["id"], number=1)
    if change is None:
        return None
    change = json.loads(json.dumps(change))  # as the store keeps it
    return apply_delta(copy.deepcopy(stored), change)


def test_an_unchanged_graph_is_an_empty_delta_that_rebuilds_it() -> None:
    stored = _stored()
    change = delta(stored, StoredVersion(stored), graph_id=stored["id"], number=1)
    assert change == {"graph_id": stored["id"], "version": 1, "nodes": {}, "fields": {}}
    assert json.dumps(_round_trip(copy.deepcopy(stored), stored)) == json.dumps(stored)


def test_a_changed_node_and_field_are_all_the_delta_keeps() -> None:
    stored = _stored()
    graph = copy.deepcopy(stored)
    graph["nodes"][-1]["prompt"] = "Something else entirely."
    graph["max_iterations"] = 7
    change = delta(graph, StoredVersion(stored), graph_id=stored["id"], number=3)
    assert change is not None
    assert list(change["nodes"]) == [str(len(stored["nodes"]) - 1)]
    assert change["fields"] == {"max_iterations": 7}
    assert json.dumps(_round_trip(graph, stored)) == json.dumps(graph)


def test_a_node_with_its_keys_in_another_order_counts_as_changed() -> None:
    stored = _stored()  # roles run in mapping order: equal but reordered is not the same
    graph = copy.deepcopy(stored)
    graph["nodes"][0] = dict(reversed(list(graph["nodes"][0].items())))
    rebuilt = _round_trip(graph, stored)
    assert rebuilt == stored  # equal as dicts ...
    assert json.dumps(rebuilt) == json.dumps(graph) != json.dumps(stored)  # ... order kept


def test_a_graph_of_another_shape_gets_no_delta() -> None:
    stored = _stored()
    fewer = copy.deepcopy(stored)
    fewer["nodes"].pop()
    reordered = dict(reversed(list(stored.items())))
    assert _round_trip(fewer, stored) is None
    assert _round_trip(reordered, stored) is None


def test_values_equal_in_python_but_written_differently_count_as_changed() -> None:
    stored = _stored()
    for old, new in ((1, 1.0), (1, True), (None, float("nan")), (2**70, 2**70)):
        before = copy.deepcopy(stored)
        before["nodes"][0]["config"] = {"x": old}
        graph = copy.deepcopy(before)
        graph["nodes"][0]["config"] = {"x": new}
        change = delta(graph, StoredVersion(before), graph_id=stored["id"], number=1)
        assert change is not None and "0" in change["nodes"], (old, new)
        assert repr(apply_delta(copy.deepcopy(before), change)) == repr(graph)


_TWINS = st.sampled_from([1, 1.0, True, 0, 0.0, False, None, float("nan"), 2**70, "1", [1],
                          {"a": 1, "b": 2}, {"b": 2, "a": 1}])


def _nodes(values: st.SearchStrategy[Any]) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.lists(st.fixed_dictionaries({"id": st.text(max_size=3), "config": values}),
                    min_size=1, max_size=6)


@given(stored=_nodes(_TWINS), data=st.data())
def test_the_changed_nodes_are_those_not_equal_and_written_alike(
        stored: list[dict[str, Any]], data: st.DataObject) -> None:
    """The one-text shortcut gives the node-by-node answer: equal *and* written alike
    (key order, ``1`` / ``1.0`` / ``true``, NaN, integers orjson cannot write)."""
    graph = {"id": "g", "nodes": stored}
    nodes = [data.draw(st.one_of(st.just(copy.deepcopy(node)),
                                 st.just(dict(reversed(list(node.items())))),
                                 st.builds(lambda v, n=node: {**n, "config": v}, _TWINS)))
             for node in stored]

    change = delta({"id": "g", "nodes": nodes}, StoredVersion(graph), graph_id="g", number=1)

    assert change is not None
    expected = {str(i): node for i, (node, old) in enumerate(zip(nodes, stored, strict=True))
                if not _written_alike(node, old)}
    assert change["nodes"] == expected


def _written_alike(node: Any, old: Any) -> bool:
    try:
        return bool(node == old and orjson.dumps(node) == orjson.dumps(old))
    except TypeError:
        return False
