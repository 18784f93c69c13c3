"""The synthetic graph of an imported run: one node per step the trace became, chained in
the order they ran (descriptive only: an imported run is never executed from it)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from forklab.engine.canonical import fingerprint
from forklab.engine.graph import GraphSpec, parse_graph


@dataclass(frozen=True, slots=True)
class GraphNode:
    id: str
    kind: str  # "agent" (owns calls) | "step"
    description: str  # the span's (or agent's) name as the trace gave it
    model: tuple[str, str] | None  # (provider, model) of its first model call


def synthetic_graph(trace_id: str, executions: list[GraphNode]) -> GraphSpec:
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
        "id": f"trace-{trace_id[:16]}", "name": f"imported trace {trace_id}",
        "start": executions[0].id if executions else "agent",
        "nodes": list(nodes.values()), "edges": edges,
        "description": f"synthetic graph of trace {trace_id} ({fingerprint(edges)[:8]})"}
    if len(executions) > len(nodes):
        spec["max_iterations"] = max(1, len(executions))
    return parse_graph(spec)


__all__ = ["GraphNode", "synthetic_graph"]
