"""Lookups over one graph version, built once: node by id, successors, predecessors.

A :class:`GraphIndex` is derived from a :class:`~forklab.engine.graph.GraphSpec`'s nodes and
edges and never changes (graph specs are frozen), so the spec builds it on first use and
keeps it for its lifetime (``GraphSpec.index``). Lists keep the order the edges are written
in — the planner's frontier order depends on it — and keep duplicate edges, exactly as a
scan of ``edges`` would.

Cost: building is linear in nodes + edges; every lookup is one dictionary access, so the
planner's per-node work no longer grows with the graph (a ``join: all`` node with 1,000
predecessors is checked in O(its predecessors), not O(edges) per arrival).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class GraphIndex:
    """Read-only indexes of one graph version (see module invariants)."""

    nodes: Mapping[str, Any]
    position: Mapping[str, int]
    successors: Mapping[str, tuple[str, ...]]
    predecessors: Mapping[str, tuple[str, ...]]
    predecessor_sets: Mapping[str, frozenset[str]]

    @classmethod
    def build(cls, nodes: Iterable[Any], edges: Iterable[Any]) -> GraphIndex:
        """Index ``nodes`` (in order) and ``edges`` (objects with ``source``/``target``)."""
        by_id: dict[str, Any] = {}
        position: dict[str, int] = {}
        for i, node in enumerate(nodes):
            by_id[node.id] = node
            position[node.id] = i
        succ: dict[str, list[str]] = {}
        pred: dict[str, list[str]] = {}
        for edge in edges:
            succ.setdefault(edge.source, []).append(edge.target)
            pred.setdefault(edge.target, []).append(edge.source)
        return cls(
            nodes=by_id, position=position,
            successors={k: tuple(v) for k, v in succ.items()},
            predecessors={k: tuple(v) for k, v in pred.items()},
            predecessor_sets={k: frozenset(v) for k, v in pred.items()},
        )

    def with_node(self, node: Any) -> GraphIndex:
        """The index after replacing the node with ``node``'s id by ``node``.

        Edges connect ids, and a replacement keeps the id, so only the node table changes:
        O(nodes) for the copied dict, with no re-scan of the edges.
        """
        return GraphIndex(nodes={**self.nodes, node.id: node}, position=self.position,
                          successors=self.successors, predecessors=self.predecessors,
                          predecessor_sets=self.predecessor_sets)
