"""A run's lineage: the chain of runs from its root to it, each loaded once.

A fork F of a run B records its base (``run.forked``), the combined changes of its lineage
(``changes``: every ancestor's, then its own; ``inherited_changes`` of them inherited) and the
effective graph its tail ran under. :class:`Lineage` walks ``base_run_id`` up to the root so
that the fork core can

- say which run's log holds each execution of the logical run (``holders`` in the folded
  state) and which graph it ran under (declared reads);
- split the combined changes into each run's own request, in lineage order;
- index every execution any run of the chain recorded (memoization and the guard).

An ancestor whose events are gone (archived) stays in the chain with its folded state
unknown: its boundaries are reported missing, never guessed; so are the boundaries behind a
run's compaction boundary that no snapshot lets a fork fold to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.events import AnyEvent, RunForked
from forklab.engine.fork.changes import Change, parse_changes
from forklab.engine.graph import GraphSpec, parse_stored_graph
from forklab.engine.reducers import fold
from forklab.engine.state import RunState
from forklab.engine.store import Store


def forked_event(events: Sequence[AnyEvent]) -> RunForked | None:
    """The ``run.forked`` event of a fork's log (None for any other run)."""
    return next((e for e in events[:3] if isinstance(e, RunForked)), None)


@dataclass
class Link:
    """One run of a lineage."""

    run_id: str
    events: list[AnyEvent]
    state: RunState | None  # None when its events are gone (archived)
    graph: GraphSpec | None
    forked: RunForked | None = None
    # states along ``events``' fold (``reducers.fold_with_waypoints``), when it was folded
    # whole: a prefix of the log is folded on from the nearest (``reducers.fold_to``)
    waypoints: tuple[RunState, ...] = ()
    snapshots: tuple[int, ...] = ()  # the store's snapshot versions of this run
    gone: str = "archived"  # why its events are gone when they are: "archived" | "deleted"

    def missing_at(self, seq: int) -> str | None:
        """Why boundary ``seq`` of this run's log cannot be folded (None: it can).

        "archived" when the log is gone; "compacted" when its head is gone and no snapshot
        at or after the compaction boundary and at or before ``seq`` lets the events
        after it be folded on — the rule ``core.prefix_folder`` folds by, so a boundary
        this calls forkable always forks."""
        if not self.events:
            return self.gone
        first = self.events[0].seq
        if first == 1 or any(first - 1 <= v <= seq for v in self.snapshots):
            return None
        return "compacted"

    @property
    def own_start(self) -> int:
        """Position in the logical run of this run's first own execution."""
        return self.state.prefix_executions if self.state else 0

    @property
    def base_run_id(self) -> str | None:
        return self.forked.base_run_id if self.forked else None

    def own_changes(self) -> list[Change]:
        """The changes this run's own request made (a primary run: none)."""
        if self.forked is None:
            return []
        return parse_changes(self.forked.changes[self.forked.inherited_changes:])

    def all_changes(self) -> list[dict[str, Any]]:
        return list(self.forked.changes) if self.forked else []


def _graph_of(run_id: str, events: Sequence[AnyEvent], state: RunState | None,
              store: Store) -> GraphSpec | None:
    forked = forked_event(events)
    if forked is not None:
        return parse_stored_graph(forked.graph)
    if state is None:
        return None
    try:
        return store.load_graph(state.graph_id, state.graph_version)
    except Exception:  # a graph no longer stored: declared reads fall back to recorded ones
        return None


def load_link(run_id: str, store: Store) -> Link:
    """Load one run of a lineage leniently (an archived run keeps an unknown state)."""
    events = store.read(run_id)
    state: RunState | None = None
    if events and events[0].seq == 1:
        state = fold(events)
    elif events:
        snapshot = store.load_snapshot(run_id)
        if snapshot is not None and snapshot.version >= events[0].seq - 1:
            state = fold([e for e in events if e.seq > snapshot.version], snapshot)
    return Link(run_id=run_id, events=list(events), state=state,
                graph=_graph_of(run_id, events, state, store), forked=forked_event(events),
                snapshots=tuple(store.snapshot_versions(run_id)),
                gone="archived" if events or store.last_seq(run_id) else "deleted")


@dataclass
class Lineage:
    """The runs from the root to ``links[-1]`` (the run being forked), in order."""

    links: list[Link] = field(default_factory=list)

    @classmethod
    def load(cls, head: Link, store: Store) -> Lineage:
        links = [head]
        seen = {head.run_id}
        while links[0].base_run_id is not None and links[0].base_run_id not in seen:
            parent = load_link(links[0].base_run_id, store)
            seen.add(parent.run_id)
            links.insert(0, parent)
        return cls(links)

    @property
    def head(self) -> Link:
        return self.links[-1]

    def index_of(self, run_id: str) -> int:
        for i, link in enumerate(self.links):
            if link.run_id == run_id:
                return i
        raise KeyError(run_id)

    def after(self, run_id: str) -> list[Link]:
        """The runs after ``run_id`` in the chain, up to the head (its descendants here)."""
        return self.links[self.index_of(run_id) + 1:]

    def states(self) -> list[RunState]:
        """Every known folded state of the chain (memo and guard index them all)."""
        return [link.state for link in self.links if link.state is not None]

    def reads_of(self, run_id: str, node: str) -> Sequence[str] | None:
        """The reads ``node`` declares in the graph run ``run_id`` executed (the node's own
        list: read it, do not edit it)."""
        for link in self.links:
            if link.run_id == run_id and link.graph is not None:
                found = link.graph.index.nodes.get(node)
                if found is not None:
                    reads: Sequence[str] = found.reads
                    return reads
        return None

    def missing(self, run_id: str, seq: int) -> str | None:
        """Why boundary ``seq`` of run ``run_id``'s log is gone ("archived", "compacted"),
        or None when it can be forked (:meth:`Link.missing_at`)."""
        for link in self.links:
            if link.run_id == run_id:
                return link.missing_at(seq)
        return "deleted"
