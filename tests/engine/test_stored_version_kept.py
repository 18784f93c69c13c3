"""A graph version SqliteStore decoded to load it is the one it diffs fork graphs against,
exactly as decoding its stored text again would make it (no second decode)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from forklab.engine.canonical import loads
from forklab.engine.graph import parse_graph, parse_stored_text
from forklab.engine.graph_delta import StoredVersion
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.sqlite_store import SqliteStore


def _fresh(name: str) -> dict[str, object]:
    """A scenario's graph no test parsed from its stored text yet (the parse cache misses)."""
    return {**SCENARIOS[name].graph().to_wire(), "description": f"fresh {uuid.uuid4()}"}


def test_the_decoded_wire_form_comes_back_on_a_miss_only() -> None:
    text = json.dumps(_fresh("diamond"))
    graph, decoded = parse_stored_text(text)
    assert decoded == json.loads(text) and graph == parse_graph(json.loads(text))
    assert parse_stored_text(text) == (graph, None)  # cached: nothing decoded


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_loaded_version_is_kept_as_decoding_its_text_makes_it(tmp_path: Path,
                                                              name: str) -> None:
    store = SqliteStore(tmp_path / "s.sqlite3")
    try:
        for by_number in (True, False):  # a version by its number, then as the latest
            graph = parse_graph(_fresh(name))
            number = store.save_graph(graph)
            store._versions.clear()
            assert store.load_graph(graph.id, number if by_number else None) == graph
            ((key, kept),) = store._versions.items()
            body = store._graph_body(store._conn(), graph.id, number)
            assert body is not None and key == (graph.id, number)
            again = StoredVersion(loads(body))
            assert (kept.keys, kept.fields, kept.nodes, kept.nodes_text) == (
                again.keys, again.fields, again.nodes, again.nodes_text)
            store._versions.clear()  # a second load hits the parse cache: nothing kept
            store.load_graph(graph.id, number)
            assert not store._versions
    finally:
        store.close()
