"""The synthetic graph of an imported run: one node per step the trace became, chained in
the order they ran (descriptive only: an imported run is never executed from it)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

from forklab.engine.graph import GraphSpec, parse_graph


@dataclass(frozen=True, slots=True)
class GraphNode:
    id: str
    kind: str  # "agent" (owns calls) | "step"
    description: str  # the span's (or agent's) name as the trace gave it
    model: tuple[str, str] | None  # (provider, model) of its first model call


def graph_id(name: str) -> str:
    """The graph an imported trace's run is filed under: ``otel-`` and the trace's
    workflow (root) name, so the traces of one app share a graph (a new version whenever
    their structure differs)."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")
    return f"otel-{slug or 'trace'}"[:100]


def synthetic_graph(executions: list[GraphNode], name: str) -> GraphSpec:
    """A valid graph spec naming each node once, with an edge for each hand-over in the
    executions' order (a repeat makes a loop, bounded by the number of executions)."""
    nodes: dict[str, dict[str, Any]] = {}
    for ex in executions:
        if ex.id in nodes:
            continue
        if ex.kind == "agent":
            provider, model = ex.model or ("imported", "unknown")
            nodes[ex.id] = {"id": ex.id, "kind": "agent", "description": ex.description,
                            "agent": {"provider": provider, "model": model},
                            "writes": [ex.id]}
        else:
            nodes[ex.id] = {"id": ex.id, "kind": "tool", "description": ex.description,
                            "tool": "forklab.imported.span"}
    edges: list[dict[str, str]] = []
    for a, b in itertools.pairwise(executions):
        edge = {"from": a.id, "to": b.id}
        if edge not in edges:
            edges.append(edge)
    if not nodes:
        nodes["agent"] = {"id": "agent", "kind": "tool", "tool": "forklab.imported.span"}
    spec: dict[str, Any] = {
        "id": graph_id(name), "name": name,
        "start": executions[0].id if executions else "agent",
        "nodes": list(nodes.values()), "edges": edges,
        "description": "the nodes and hand-overs of imported traces (descriptive only)"}
    if len(executions) > len(nodes):
        spec["max_iterations"] = max(1, len(executions))
    return parse_graph(spec)


__all__ = ["GraphNode", "graph_id", "synthetic_graph"]
