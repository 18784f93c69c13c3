"""A scratch store over a durable one: what ``forkcheck`` forks into.

Everything written (variant runs, their child runs, graphs a child run saves) stays in memory;
every read of a run, graph or snapshot the scratch store does not hold falls through to the
durable store, which is never written. So a check can fork recorded runs — and fork its own
forks, whose ancestors live in the durable store — without leaving a trace in the database.

Invariants:
- ``durable`` receives no call that writes (``append``, ``save_graph``, ``save_snapshot``,
  ``compact``, ``archive``);
- a graph identical to the durable store's latest version of that graph id resolves to that
  version's number, so a child run's graph version matches the recording's (fingerprints of
  subgraph nodes stay equal); any other graph gets the next number after both stores' ones.
"""

from __future__ import annotations

from forklab.engine.canonical import canonical_equals
from forklab.engine.events import AnyEvent
from forklab.engine.graph import GraphSpec
from forklab.engine.state import RunState
from forklab.engine.store import MemoryStore, Store


class ScratchStore(MemoryStore):
    """In-memory writes over read-only fall-through to ``durable``."""

    def __init__(self, durable: Store) -> None:
        super().__init__()
        self.durable = durable
        self._local_graphs: dict[str, dict[int, GraphSpec]] = {}

    def _holds(self, run_id: str) -> bool:
        return super().last_seq(run_id) > 0 or bool(super().snapshot_versions(run_id))

    # events ------------------------------------------------------------------------------
    def read(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[AnyEvent]:
        if self._holds(run_id):
            return super().read(run_id, after=after, upto=upto)
        return self.durable.read(run_id, after=after, upto=upto)

    def last_seq(self, run_id: str) -> int:
        return super().last_seq(run_id) if self._holds(run_id) else self.durable.last_seq(run_id)

    def run_ids(self) -> list[str]:
        return list(dict.fromkeys([*self.durable.run_ids(), *super().run_ids()]))

    # graphs ------------------------------------------------------------------------------
    def save_graph(self, graph: GraphSpec) -> int:
        durable = self.durable.graph_versions(graph.id)
        if durable and canonical_equals(self.durable.load_graph(graph.id).to_wire(),
                                        graph.to_wire()):
            return durable[-1]
        local = self._local_graphs.setdefault(graph.id, {})
        for version, known in local.items():
            if canonical_equals(known.to_wire(), graph.to_wire()):
                return version
        version = max([*durable, *local], default=0) + 1
        local[version] = graph
        return version

    def load_graph(self, graph_id: str, version: int | None = None) -> GraphSpec:
        local = self._local_graphs.get(graph_id, {})
        if version is None and local and max(local) > max(
                self.durable.graph_versions(graph_id), default=0):
            return local[max(local)]
        if version is not None and version in local:
            return local[version]
        return self.durable.load_graph(graph_id, version)

    def graph_versions(self, graph_id: str) -> list[int]:
        return sorted({*self.durable.graph_versions(graph_id), *self._local_graphs.get(graph_id, {})})

    # snapshots ---------------------------------------------------------------------------
    def load_snapshot(self, run_id: str, version: int | None = None) -> RunState | None:
        if self._holds(run_id):
            return super().load_snapshot(run_id, version)
        return self.durable.load_snapshot(run_id, version)

    def snapshot_versions(self, run_id: str) -> list[int]:
        if self._holds(run_id):
            return super().snapshot_versions(run_id)
        return self.durable.snapshot_versions(run_id)

    def first_seq(self, run_id: str) -> int:
        return super().first_seq(run_id) if self._holds(run_id) else self.durable.first_seq(run_id)
