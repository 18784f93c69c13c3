"""A picture of a graph: nodes in layers left to right, edges as curves, execution counts.

Layers come from the longest path from the start over the graph's forward edges (edges
closing a cycle, found by a depth-first search from the start, are drawn as loops under the
nodes; a loop's ends sit lowest in their columns and ``end`` highest, so no loop crosses a
node). Router choices and approval rejections are edges too, drawn dashed. Pure Python; the
template draws the SVG from the coordinates computed here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from forklab.engine.graph import END, ApprovalNode, GraphSpec, RouterNode

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 136, 46, 56, 18, 12


@dataclass
class PicNode:
    id: str
    kind: str
    x: float
    y: float
    count: int = 0
    href: str | None = None
    current: bool = False

    @property
    def cx(self) -> float:
        return self.x + NODE_W / 2


@dataclass
class PicEdge:
    path: str
    kind: str  # edge | route | reject | loop
    label: str = ""
    lx: float = 0.0
    ly: float = 0.0


@dataclass
class Picture:
    width: float
    height: float
    nodes: list[PicNode] = field(default_factory=list)
    edges: list[PicEdge] = field(default_factory=list)
    node_w: int = NODE_W
    node_h: int = NODE_H


def _links(graph: GraphSpec) -> list[tuple[str, str, str, str]]:
    """(source, target, kind, label) for every way control can flow."""
    links = [(e.source, e.target, "edge", "") for e in graph.edges]
    for node in graph.nodes:
        if isinstance(node, RouterNode):
            targets = [r.to for r in node.rules] + ([node.default] if node.default else [])
            targets += list((node.choices or {}).values())
            for target in dict.fromkeys(targets):
                links.append((node.id, target, "route", ""))
        elif isinstance(node, ApprovalNode) and node.on_reject != END:
            links.append((node.id, node.on_reject, "reject", "reject"))
    return links


def _back_edges(graph: GraphSpec, links: list[tuple[str, str, str, str]]) -> set[tuple[str, str]]:
    succ: dict[str, list[str]] = {n: [] for n in [*graph.node_ids(), END]}
    for source, target, _, _ in links:
        succ[source].append(target)
    state: dict[str, int] = {}
    back: set[tuple[str, str]] = set()
    roots = [graph.start] + [n for n in graph.node_ids() if n != graph.start]
    for root in roots:
        if root in state:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, i = stack.pop()
            if i < len(succ[node]):
                stack.append((node, i + 1))
                nxt = succ[node][i]
                if state.get(nxt) == 1:
                    back.add((node, nxt))
                elif nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, 0))
            else:
                state[node] = 2
    return back


def _layers(graph: GraphSpec, links: list[tuple[str, str, str, str]],
            back: set[tuple[str, str]]) -> dict[str, int]:
    layer = dict.fromkeys(graph.node_ids(), 0)
    uses_end = any(t == END for _, t, _, _ in links)
    if uses_end:
        layer[END] = 0
    forward = [(s, t) for s, t, _, _ in links if (s, t) not in back and s != t]
    for _ in range(len(layer)):  # longest path by relaxation; a DAG settles in |V| rounds
        changed = False
        for source, target in forward:
            if layer[target] < layer[source] + 1:
                layer[target] = layer[source] + 1
                changed = True
        if not changed:
            break
    return layer


def picture(graph: GraphSpec, executed: Iterable[str], *,
            hrefs: dict[str, str] | None = None, current: str | None = None) -> Picture:
    """Lay ``graph`` out; ``executed`` (the node of each of the run's executions) gives the
    counts."""
    links = _links(graph)
    back = _back_edges(graph, links)
    layer = _layers(graph, links, back)
    columns: dict[int, list[str]] = {}
    for node_id in layer:
        columns.setdefault(layer[node_id], []).append(node_id)
    # loops are drawn under the nodes: their ends sit at the bottom of their columns and
    # `end` at the top, so no loop passes through another node (`end` included)
    looped = {n for edge in back for n in edge} | {s for s, t, _, _ in links if s == t}
    for ids in columns.values():
        ids.sort(key=lambda n: 0 if n == END else 2 if n in looped else 1)
    tallest = max(len(c) for c in columns.values())
    height = tallest * NODE_H + (tallest - 1) * GAP_Y + 2 * PAD + 34
    counts = Counter(executed)
    kinds = {n.id: n.kind for n in graph.nodes} | {END: "end"}
    pic = Picture(width=len(columns) * (NODE_W + GAP_X) - GAP_X + 2 * PAD, height=height)
    where: dict[str, PicNode] = {}
    for col, ids in sorted(columns.items()):
        top = PAD + (tallest - len(ids)) * (NODE_H + GAP_Y) / 2
        for row, node_id in enumerate(ids):
            node = PicNode(id=node_id, kind=kinds[node_id], x=PAD + col * (NODE_W + GAP_X),
                           y=top + row * (NODE_H + GAP_Y), count=counts.get(node_id, 0),
                           href=(hrefs or {}).get(node_id), current=node_id == current)
            where[node_id] = node
            pic.nodes.append(node)
    for source, target, kind, label in links:
        a, b = where[source], where[target]
        if (source, target) in back or source == target:
            pic.edges.append(_loop(a, b, pic.height))
        else:
            pic.edges.append(_curve(a, b, kind, label))
    return pic


def _curve(a: PicNode, b: PicNode, kind: str, label: str) -> PicEdge:
    x1, y1 = a.x + NODE_W, a.y + NODE_H / 2
    x2, y2 = b.x - 4, b.y + NODE_H / 2
    mid = (x1 + x2) / 2
    return PicEdge(path=f"M{x1:.0f},{y1:.0f} C{mid:.0f},{y1:.0f} {mid:.0f},{y2:.0f} "
                        f"{x2:.0f},{y2:.0f}", kind=kind, label=label, lx=mid, ly=(y1 + y2) / 2)


def _loop(a: PicNode, b: PicNode, height: float) -> PicEdge:
    """A back edge: down from the source, along the bottom, up into the target."""
    x1, y1 = a.cx, a.y + NODE_H
    x2, y2 = b.cx + 8, b.y + NODE_H + 4
    low = height - 10
    return PicEdge(path=f"M{x1:.0f},{y1:.0f} C{x1:.0f},{low:.0f} {x2:.0f},{low:.0f} "
                        f"{x2:.0f},{y2:.0f}", kind="loop", label="loop",
                   lx=(x1 + x2) / 2, ly=low - 4)
