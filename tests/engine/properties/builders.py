"""Hand-built graphs for the named examples: nodes over the suite's deterministic tools."""

from __future__ import annotations

import itertools
from typing import Any

from forklab.engine.graph import GraphSpec, parse_graph
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.store import MemoryStore
from tests.engine.properties.world import WRITE_TOOL, Harness, hitl

LOOKUP = "props.lookup"


def agent(id: str, reads: list[str], writes: str, **extra: Any) -> dict[str, Any]:
    return {"id": id, "kind": "agent", "reads": reads, "writes": [writes],
            "agent": extra.pop("agent", {"model": "scripted-small", "max_tokens": 32}), **extra}


def tool(id: str, reads: list[str], writes: list[str], path: str = LOOKUP,
         **extra: Any) -> dict[str, Any]:
    return {"id": id, "kind": "tool", "tool": path, "reads": reads, "writes": writes,
            "params": {"out": writes}, "effect": "write" if path == WRITE_TOOL else "read",
            **extra}


def chain(graph_id: str, *nodes: dict[str, Any], **extra: Any) -> GraphSpec:
    edges = [{"from": a["id"], "to": b["id"]} for a, b in itertools.pairwise(nodes)]
    return parse_graph({"id": graph_id, "start": nodes[0]["id"], "nodes": list(nodes),
                        "edges": edges, **extra})


def record(h: Harness, graph: GraphSpec, input: dict[str, Any],
           *children: GraphSpec) -> RecordedRun:
    store = MemoryStore()
    for child in children:
        store.save_graph(child)
    return run_recorded(graph, input, store=store, env=h.env, hitl=hitl)
