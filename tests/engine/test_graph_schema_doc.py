"""The JSON Schema in docs/ is the one the code exports, and the documented example loads."""

from __future__ import annotations

import json
import re
from pathlib import Path

from forklab.engine.graph import graph_json_schema, loads_graph

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_checked_in_schema_matches_the_exported_schema() -> None:
    checked_in = json.loads((DOCS / "graph.schema.json").read_text())
    assert checked_in == json.loads(json.dumps(graph_json_schema())), (
        "docs/graph.schema.json is stale; regenerate it with graph_json_schema()")


def test_the_complete_example_in_graph_format_md_is_a_valid_graph() -> None:
    text = (DOCS / "graph-format.md").read_text()
    example = re.search(r"## A complete example.*?```yaml\n(.*?)```", text, re.S)
    assert example is not None
    graph = loads_graph(example.group(1))
    assert {n.kind for n in graph.nodes} == {"agent", "tool", "router", "approval", "subgraph"}
    assert graph.node("draft").role_order == ["writer", "critics"]
