"""``run`` and ``run_recorded``: the two ways to execute a graph (SPEC §2).

``run`` returns final memory and keeps no log. ``run_recorded`` is the same execution with
everything needed to refer back: a log in a store, the graph saved before execution, and a
:class:`RecordedRun` handle that ``fork`` accepts directly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from forklab.engine.environment import Environment
from forklab.engine.events import AnyEvent, Event
from forklab.engine.graph import AgentSpec, GraphSpec
from forklab.engine.oracle import HumanAnswer
from forklab.engine.reducers import fold
from forklab.engine.runner import CancelToken, Runner
from forklab.engine.state import RunState
from forklab.engine.store import MemoryStore, Store


@dataclass
class RecordedRun:
    """A recorded run: pass it to ``fork``; it carries the run id, log, store and registry."""

    run_id: str
    state: RunState
    store: Store
    graph: GraphSpec
    env: Environment

    @property
    def memory(self) -> dict[str, Any]:
        return self.state.memory

    @property
    def event_log(self) -> list[AnyEvent]:
        return self.store.read(self.run_id)

    @property
    def registry(self) -> dict[str, AgentSpec]:
        """The run-scoped agent registry (the graph's inline agent definitions)."""
        return dict(self.graph.agents)


class _NullStore(MemoryStore):
    """Keeps graphs but drops events: what ``run`` executes against."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, int] = {}

    def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> None:
        from forklab.engine.store import check_append

        check_append(run_id, events, expected_seq, self._last.get(run_id, 0))
        self._last[run_id] = events[-1].seq if events else expected_seq

    def last_seq(self, run_id: str) -> int:
        return self._last.get(run_id, 0)


def run(graph: GraphSpec, input: dict[str, Any], *, env: Environment | None = None,
        hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None = None) -> dict[str, Any]:
    """Execute ``graph`` on ``input`` and return the final memory; no log is kept."""
    env = env or Environment()
    runner = Runner(graph, store=_NullStore(), run_id=env.ids(), env=env, hitl=hitl)
    return runner.start(input).memory


def run_recorded(
    graph: GraphSpec,
    input: dict[str, Any],
    *,
    store: Store | None = None,
    env: Environment | None = None,
    run_id: str | None = None,
    label: str = "",
    hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None = None,
    cancel: CancelToken | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> RecordedRun:
    """Execute ``graph`` recording every event into ``store`` (a new MemoryStore if None).

    The graph is saved before execution; no compaction happens, so every point of the
    run stays addressable. A run that pauses at an approval gate returns with status
    ``paused``; continue it with :func:`answer_run`.
    """
    env = env or Environment()
    store = store if store is not None else MemoryStore()
    runner = Runner(graph, store=store, run_id=run_id or env.ids(), env=env, hitl=hitl,
                    cancel=cancel, on_event=on_event)
    state = runner.start(input, label=label)
    return RecordedRun(run_id=runner.run_id, state=state, store=store, graph=graph, env=env)


def load_run(run_id: str, *, store: Store, env: Environment | None = None) -> RecordedRun:
    """Rebuild a recorded run's handle from its log (graph version from ``run.started``)."""
    from forklab.engine.errors import RunNotFound

    events = store.read(run_id)
    if not events:
        raise RunNotFound(f"no run {run_id!r} in this store", run_id=run_id)
    state = fold(events) if events[0].seq == 1 else _fold_from_snapshot(run_id, store, events)
    graph = store.load_graph(state.graph_id, state.graph_version)
    return RecordedRun(run_id=run_id, state=state, store=store, graph=graph,
                       env=env or Environment())


def _fold_from_snapshot(run_id: str, store: Store, events: list[AnyEvent]) -> RunState:
    from forklab.engine.errors import EventGapError

    snapshot = store.load_snapshot(run_id)
    if snapshot is None or snapshot.version < events[0].seq - 1:
        raise EventGapError(f"run {run_id!r} starts at seq {events[0].seq} and has no "
                            "snapshot covering the missing events", run_id=run_id)
    return fold([e for e in events if e.seq > snapshot.version], snapshot)
