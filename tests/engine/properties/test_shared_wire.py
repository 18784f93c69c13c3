"""A fork's graph in its stored form, sharing the base version's nodes (``shared_wire``).

``run.forked`` carries the graph the tail runs under. Built from the stored form its base was
read from — the changed nodes' dumps in their places, every other node the stored dict
itself — it must be exactly the graph's own ``to_wire()``, over generated graphs and every
config-type change, and read back to the same graph.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine.fork.apply import effective_graph
from forklab.engine.graph import parse_graph, parse_stored_graph
from forklab.engine.state import RunState
from tests.engine.properties.changes import CONFIG_KINDS, changes
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples


def _stored(graph: Any) -> Any:
    """The graph as a store reads it back: parsed from the text of its stored form."""
    return parse_stored_graph(json.dumps(graph.to_wire(), ensure_ascii=False))


@given(case=graph_cases(), data=st.data())
@examples(60)
def test_a_changed_graph_s_shared_wire_is_its_wire_and_shares_the_rest(case: Any,
                                                                        data: Any) -> None:
    base = _stored(case.graph)
    stored = base.shared_wire()
    assert stored == base.to_wire()
    items = data.draw(st.lists(changes(base, RunState(), kinds=CONFIG_KINDS), min_size=1,
                               max_size=3))
    graph = effective_graph(base, items, one_request=False)
    wire = graph.shared_wire()
    assert json.dumps(wire) == json.dumps(graph.to_wire())  # same keys, order and values
    assert parse_graph(wire) == graph
    changed = {n.id for n, old in zip(graph.nodes, base.nodes, strict=True) if n is not old}
    for node, old in zip(wire["nodes"], stored["nodes"], strict=True):
        assert (node is old) == (node["id"] not in changed)  # the rest is the stored dicts


def test_a_graph_read_from_nothing_stored_gives_its_dump() -> None:
    graph = parse_graph({"id": "g", "start": "a", "nodes": [
        {"id": "a", "kind": "agent", "agent": {}, "reads": [], "writes": ["x"]}]})
    assert graph.shared_wire() == graph.to_wire()
