"""A graph's content hash is the fingerprint of its stored form, whichever path computes it."""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine.canonical import fingerprint
from forklab.engine.graph import parse_graph
from forklab.engine.scenarios import SCENARIOS


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_scenarios_hash_is_the_fingerprint_of_its_wire_form(name: str) -> None:
    graph = SCENARIOS[name].graph()
    assert graph.content_hash == fingerprint(graph.to_wire())


@pytest.mark.parametrize("params", [
    {"a": None, "b": [None, {"c": None, "d": 1}], "e": {"f": None}},  # nulls to strip
    {"text": "null is a word here", "n": 2**70},  # "null" in a string; a wide integer
    {"x": 1, "y": [1.5, "two"], "z": {"w": True}},
])
def test_free_form_values_hash_as_their_wire_form(params: dict[str, Any]) -> None:
    wire = SCENARIOS["research-write"].graph().to_wire()
    node = next(n for n in wire["nodes"] if n["kind"] == "agent")
    node["agent"] = {"provider": "scripted", "model": "scripted-small", "params": params}
    graph = parse_graph(wire)
    assert graph.content_hash == fingerprint(graph.to_wire())
