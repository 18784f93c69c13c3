"""The run being forked, loaded once: its final state, graph, lineage and fork-point index.

A leaf of the fork package's seams: everything that plans, estimates, applies or runs a fork
takes a :class:`BaseRun`, and this module imports none of them (so none of them is a cycle).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from forklab.engine.collector import collector_paused
from forklab.engine.environment import Environment
from forklab.engine.errors import (
    ForklabError,
    RunInProgress,
    RunNotFound,
    SourceMissing,
    VersionSkewError,
)
from forklab.engine.events import REPLAY_VERSION, AnyEvent, RunForked, TraceImported
from forklab.engine.fork.lineage import Lineage, Link, forked_event
from forklab.engine.fork.points import ForkPoint, RunIndex
from forklab.engine.graph import GraphSpec, parse_stored_graph
from forklab.engine.recording import RecordedRun
from forklab.engine.reducers import fold, fold_with_waypoints
from forklab.engine.state import Execution, RunState
from forklab.engine.store import Store


@dataclass
class BaseRun:
    """The run being forked, with its lineage, loaded once."""

    run_id: str
    store: Store
    env: Environment
    events: list[AnyEvent]
    state: RunState
    graph: GraphSpec
    index: RunIndex
    lineage: Lineage

    def own_executions(self) -> list[Execution]:
        """Executions recorded in this run's own log (not inherited from its base)."""
        skip = self.state.prefix_executions
        return self.state.executions[skip:]

    def load_run(self, run_id: str) -> RunState | None:
        """A run of the store, folded (child runs a subgraph node started)."""
        events = self.store.read(run_id)
        return fold(events) if events and events[0].seq == 1 else None

    def link(self, run_id: str | None) -> Link:
        return self.lineage.links[self.lineage.index_of(run_id or self.run_id)]


def _final_state(run_id: str, store: Store, events: list[AnyEvent], *,
                 fold_log: bool = False) -> tuple[RunState, tuple[RunState, ...]]:
    """The run's final state, and the waypoints of its log's fold when it was folded whole
    (:func:`~forklab.engine.reducers.fold_with_waypoints`: a prefix starts from one).

    A whole log, read anyway (index, prefix, lineage), is folded rather than the store's
    stored final state decoded: the fold shares its records with the events where a decoded
    copy builds each again (5,012 events: 6.5 ms against 16-18 ms for the Django store's
    ``FinalState`` row), and it leaves the waypoints. The stored state serves a log that
    lost its head (compacted): it saves folding from the snapshot."""
    if events and events[0].seq == 1:
        return fold_with_waypoints(events)
    stored = None if fold_log else store.load_final_state(run_id)
    if stored is not None and (not events or stored.version == events[-1].seq):
        return stored, ()
    snapshot = store.load_snapshot(run_id)
    last = store.last_seq(run_id)
    if snapshot is None or (not events and snapshot.version < last):
        raise SourceMissing(
            f"run {run_id!r} was archived: its events are gone"
            + ("" if snapshot is None else f" and its newest snapshot (seq {snapshot.version}) "
               f"is not its end (seq {last})")
            + "; it cannot be forked — save runs you care about as cases", run_id=run_id)
    return fold([e for e in events if e.seq > snapshot.version], snapshot), ()


def load_base(base: str | RecordedRun, *, store: Store | None, env: Environment | None,
              require_finished: bool = True, fold_log: bool = False) -> BaseRun:
    """Load a finished, forkable run (refusing unfinished, archived and skewed ones).

    Its final state is its log folded, or — for a compacted log — the store's stored one
    when it keeps it (``load_final_state``); ``fold_log=True`` never takes a stored state
    — for checks that verify the log itself.
    Loading builds a state and an index as large as the log; the cyclic collector is paused
    meanwhile (a full collection walking the freshly built base was ~a third of a cold fork
    setup on a 100k-event run) — reference counting still frees everything.
    """
    with collector_paused():
        return _load_base(base, store=store, env=env, require_finished=require_finished,
                          fold_log=fold_log)


def _load_base(base: str | RecordedRun, *, store: Store | None, env: Environment | None,
               require_finished: bool, fold_log: bool) -> BaseRun:
    if isinstance(base, RecordedRun):
        run_id, store, env = base.run_id, store or base.store, env or base.env
    else:
        run_id = base
    if store is None:
        raise RunNotFound("fork(base=<run id>) needs the store holding the run; pass store=")
    env = env or Environment()
    events = store.read(run_id)
    if not events and not store.snapshot_versions(run_id):
        if store.last_seq(run_id):
            raise SourceMissing(f"run {run_id!r} was archived and its events are gone; it "
                                "cannot be forked", run_id=run_id)
        raise RunNotFound(f"no run {run_id!r}", run_id=run_id)
    state, waypoints = _final_state(run_id, store, events, fold_log=fold_log)
    if require_finished and not state.finished:
        raise RunInProgress(
            f"run {run_id!r} is {state.status}; only a finished run can be forked — wait for "
            "it, answer it, or cancel it first", run_id=run_id, status=state.status)
    if state.replay_version != REPLAY_VERSION:
        raise VersionSkewError(
            f"run {run_id!r} was recorded under replay version {state.replay_version}; this "
            f"engine replays version {REPLAY_VERSION} and will not approximate it",
            run_id=run_id, recorded=state.replay_version, current=REPLAY_VERSION)
    graph = graph_of(state, events, store)
    head = Link(run_id=run_id, events=list(events), state=state, graph=graph,
                forked=forked_event(events), waypoints=waypoints,
                snapshots=() if events and events[0].seq == 1
                else tuple(store.snapshot_versions(run_id)))
    lineage = Lineage.load(head, store)
    index = RunIndex.build(events, state, reads_of=lineage.reads_of, missing=lineage.missing)
    return BaseRun(run_id=run_id, store=store, env=env, events=events, state=state,
                   graph=graph, index=index, lineage=lineage)


def graph_of(state: RunState, events: Sequence[AnyEvent], store: Store) -> GraphSpec:
    """The graph a run executed (a fork's effective graph, else its stored version)."""
    forked = forked_event(events)
    if forked is not None:
        return parse_stored_graph(forked.graph)
    return store.load_graph(state.graph_id, state.graph_version)


def fork_points(events: Sequence[AnyEvent], *, store: Any = None) -> list[ForkPoint]:
    """Every addressable boundary of a run's logical run, in order, with node, occurrence,
    iteration, seq and the id of the run whose log holds it.

    ``events`` is the run's own log; with ``store``, a fork's ancestors (and a compacted
    log's snapshots) are looked up so boundaries that are gone are left out: every point
    listed resolves and forks.
    """
    if store is not None and events and (events[0].seq != 1 or (
            len(events) > 1 and isinstance(events[1], RunForked))):
        try:
            return load_base(events[0].run_id, store=store, env=None,
                             require_finished=False).index.points()
        except ForklabError:  # listing never fails: the log alone still lists its points
            pass
    index = RunIndex.build(events)
    if (len(events) > 1 and isinstance(events[1], TraceImported)
            and not any(e.kind == "workflow" for e in index.forkable())):
        # a run imported from a trace forks one model call at a time (SPEC §8 (a)): a point
        # before each of its model turns, none at its nodes (nothing re-executes them); the
        # workflow base a mapped trace became re-executes its code and lists every point
        return [e.call_point(part) for e in index.forkable() for part, _ in e.calls
                if part.rsplit("/", 1)[-1].startswith("turn:")]
    return index.points()


__all__ = ["BaseRun", "fork_points", "graph_of", "load_base"]
