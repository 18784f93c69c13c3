"""A fork's effective graph stored as a reference to a stored graph version plus its changes.

A fork's ``run.forked`` event carries its effective graph whole (``graph``, the wire form of
:meth:`GraphSpec.to_wire`): its base's graph with the fork's config changes applied, which
for a prompt change is every node of the base's graph but one. A durable store may keep
instead a *delta* against the stored version the fork's ``run.started`` names::

    {"graph_id": G, "version": V, "nodes": {"<index>": <node wire>, …},
     "fields": {"<top-level key>": <value>, …}}

— the nodes (by position) and top-level fields whose JSON text differs from version V's.
:func:`apply_delta` rebuilds the event's graph exactly: the same keys in the same order (a
multi-role node runs its roles in mapping order, so order is compared, not just equality).
A graph with another node count, other top-level keys or keys in another order gets no
delta (the store keeps the copy). Sound because a stored graph version never changes and is
never deleted: the reference cannot go stale, whatever happens to the base run's events.
"""

from __future__ import annotations

from typing import Any

import orjson


class StoredVersion:
    """A stored graph version decoded once: its top-level fields, each with its
    order-sensitive text (:func:`_text`), and its nodes with the text of their whole list
    (each node's own text is written only if a delta needs it: :meth:`node_texts`)."""

    __slots__ = ("_node_texts", "fields", "keys", "nodes", "nodes_text")

    def __init__(self, wire: dict[str, Any]) -> None:
        self.keys = list(wire)
        self.fields = {k: (v, _text(v)) for k, v in wire.items() if k != "nodes"}
        self.nodes: list[Any] = list(wire.get("nodes") or ())
        self.nodes_text = _text(self.nodes)
        self._node_texts: list[bytes | None] | None = None

    def node_texts(self) -> list[bytes | None]:
        """Each node's text (written once; a version is shared by the store's threads, and
        two writing it at once write the same list)."""
        if self._node_texts is None:
            self._node_texts = [_text(node) for node in self.nodes]
        return self._node_texts


def _text(value: Any) -> bytes | None:
    """JSON text that keeps key order (None: orjson cannot write it, e.g. a set or an
    integer wider than 64 bits — such a value always counts as changed)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return None


def _same(value: Any, stored: tuple[Any, bytes | None]) -> bool:
    """Equal and written alike: ``==`` tells NaN from null (NaN equals nothing) and the
    text tells 1 from 1.0 and true and one key order from another."""
    return stored[1] is not None and value == stored[0] and _text(value) == stored[1]


def delta(graph: dict[str, Any], version: StoredVersion, *, graph_id: str,
          number: int) -> dict[str, Any] | None:
    """The delta of ``graph`` (a wire dict) against stored ``version`` (``number`` of
    ``graph_id``), or None when it cannot be expressed as one (see the module doc)."""
    nodes = graph.get("nodes")
    if list(graph) != version.keys or not isinstance(nodes, list) \
            or len(nodes) != len(version.nodes):
        return None
    fields = {k: v for k, v in graph.items()
              if k != "nodes" and not _same(v, version.fields[k])}
    return {"graph_id": graph_id, "version": number, "nodes": _changed_nodes(nodes, version),
            "fields": fields}


def _changed_nodes(nodes: list[Any], version: StoredVersion) -> dict[str, Any]:
    """The nodes (by position) not :func:`_same` as the version's.

    Settled with one comparison per node and one text of the whole list when it can be:
    the nodes that compare equal are all written alike exactly when the list with the
    others put back as stored is written as the stored list (JSON text parses one way, so
    two lists of one length with one text have element texts equal one by one). Otherwise
    (a node written another way, or text orjson cannot write) node by node, as ever: the
    same answer either way, and ~2 instead of ~4 ms for a 1,000-node graph.
    """
    stored = version.nodes
    unequal = [i for i, (node, old) in enumerate(zip(nodes, stored, strict=True))
               if node != old]
    if version.nodes_text is not None:
        candidate = list(nodes)
        for i in unequal:
            candidate[i] = stored[i]
        if _text(candidate) == version.nodes_text:
            return {str(i): nodes[i] for i in unequal}
    texts = version.node_texts()
    return {str(i): node for i, node in enumerate(nodes)
            if not _same(node, (stored[i], texts[i]))}


def apply_delta(stored: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """The graph ``change`` describes, from the freshly decoded wire dict of its stored
    version (``stored`` is used in place: pass a private copy)."""
    fields: dict[str, Any] = change.get("fields") or {}
    graph = {k: fields.get(k, v) for k, v in stored.items()}
    nodes = graph["nodes"]
    for index, node in (change.get("nodes") or {}).items():
        nodes[int(index)] = node
    return graph
