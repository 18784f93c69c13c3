"""Cached reads of whole run logs, folded states and comparisons (the dashboard's heavy reads).

A finished run's log never changes, so what was read of it, the states folded from it and
comparisons with another finished run are kept per process (LRU) and shared between callers:
treat what these return as read-only. ``clear_caches`` forgets everything (benchmarks measure
cold renders with it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.db.models import F

from forklab.engine.fork.wire import CallWire, ForkPointWire, RunDiffWire
from forklab.runs import final_states, forked_rows
from forklab.runs.errors import NotFound
from forklab.runs.models import Event, Run

if TYPE_CHECKING:
    from forklab.engine.events import AnyEvent
    from forklab.engine.fork.diff import RunDiff
    from forklab.engine.state import RunState

EVENT_CACHE_RUNS = 8
STATE_CACHE_SIZE = 6


class Lru[K, V]:
    """A small thread-safe LRU map: what each of this module's caches is."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


@dataclass(frozen=True)
class Comparison:
    """Two runs' RunDiff and what the diff page shows beside it: both final states and the
    variant's own calls (after its fork point) with their provenance labels."""

    diff: RunDiffWire
    base_state: RunState
    variant_state: RunState

    @cached_property
    def calls(self) -> list[CallWire]:
        # built on first use: a finished fork's page shows its stored calls instead
        state = self.variant_state
        return [CallWire.from_wire(c.to_wire()) for c in state.calls[state.tail_from_call:]]


_EVENTS: Lru[tuple[str, int], list[AnyEvent]] = Lru(EVENT_CACHE_RUNS)
_STATES: Lru[tuple[str, int, int | None], RunState] = Lru(STATE_CACHE_SIZE)
_COMPARISONS: Lru[tuple[str, int, str, int, bool], Comparison] = Lru(STATE_CACHE_SIZE)
_DIFFS: Lru[tuple[str, int, str, int], RunDiff] = Lru(STATE_CACHE_SIZE)
VIEW_CACHE_SIZE = 32
#: the read model's views of finished runs (``forklab.runs.readmodel``), emptied with the rest
VIEWS: Lru[tuple[Any, ...], Any] = Lru(VIEW_CACHE_SIZE)


def run_events(run: Run, *, upto: int | None = None) -> list[AnyEvent]:
    """The run's engine events (those with ``seq <= upto`` when given).

    A finished run's log never changes, so what was read of it is kept (LRU over runs) and
    extended on demand: a page that needs the first half of a long log reads only that half.
    """
    from forklab.runs.store import DjangoStore

    key = (run.id, run.last_seq)
    cached = _EVENTS.get(key)
    known = cached[-1].seq if cached else 0
    if cached is None or (known < run.last_seq and (upto is None or upto > known)):
        more = DjangoStore(run.project).read(run.id, after=known, upto=upto)
        cached = (cached or []) + more
        if run.finished:
            _EVENTS.put(key, cached)
    if upto is None:
        return cached
    return [e for e in cached if e.seq <= upto] if cached and cached[0].seq != 1 else cached[:upto]


def state_at(run: Run, seq: int | None = None) -> RunState:
    """The run's folded state after event ``seq`` (its final state when None).

    A finished run's states are cached (LRU) and shared between callers: treat the returned
    state as read-only.
    """
    key = (run.id, run.last_seq, seq)
    state = _STATES.get(key)
    if state is None:
        state = _fold_at(run, seq)
        if run.finished:
            _STATES.put(key, state)
    return state


def _fold_at(run: Run, seq: int | None) -> RunState:
    from forklab.engine.reducers import fold

    if run.finished and (seq is None or seq >= run.last_seq):
        stored = final_states.load(run.id, using="default", version=run.last_seq)
        if stored is not None:  # written with the finishing event: no fold needed
            return stored

    events = run_events(run, upto=seq)
    if not events:
        raise NotFound(f"run {run.id!r} has no events (archived?)", run_id=run.id)
    if events[0].seq != 1:
        from forklab.runs.store import DjangoStore

        snapshot = DjangoStore(run.project).load_snapshot(run.id)
        if snapshot is None or (seq is not None and seq < snapshot.version):
            raise NotFound(f"run {run.id!r} was compacted; seq {seq} is gone", run_id=run.id)
        return fold([e for e in events if e.seq > snapshot.version and
                     (seq is None or e.seq <= seq)], snapshot)
    return fold(events)


def clear_caches() -> None:
    """Forget every cached log, state and view (benchmarks measure cold renders with it)."""
    for cache in (_EVENTS, _STATES, _COMPARISONS, _DIFFS, VIEWS):
        cache.clear()
    forked_rows.clear_caches()
    final_states.clear_caches()


def run_diff(base: Run, variant: Run) -> RunDiff:
    """The engine's RunDiff of two runs' final states — the one diff the API's ``/diff/``,
    sweep summaries and the dashboard's diff page all show. Finished runs' final states are
    their stored ones (no log read); two finished runs' diff is cached (LRU): read-only."""
    from forklab.engine.fork.changes import parse_change
    from forklab.engine.fork.diff import diff_runs

    key = (base.id, base.last_seq, variant.id, variant.last_seq)
    diff = _DIFFS.get(key)
    if diff is None:
        changes = [parse_change(c).describe() for c in variant.fork_mutations or []]
        diff = diff_runs(state_at(base), state_at(variant), changes=changes)
        if base.finished and variant.finished:
            _DIFFS.put(key, diff)
    return diff


def compare_runs(base: Run, variant: Run, *, diff: RunDiffWire | None = None) -> Comparison:
    """The RunDiff of two runs plus what the diff page shows with it. No access check:
    callers (the dashboard's views, a resolved share link) have done it. Two finished runs'
    comparison is cached (LRU): treat it as read-only.

    ``diff``: their RunDiff when the caller holds it already — a finished fork's stored
    result against this very base (``StoredForkResult.diff_against``), used as is instead of
    diffing both states and validating the model again (the cold diff page's cost). (A
    finished fork's ``explain()`` and calls are its stored result too:
    ``forklab.runs.readmodel``.)"""
    key = (base.id, base.last_seq, variant.id, variant.last_seq, diff is not None)
    result = _COMPARISONS.get(key)
    if result is None:
        result = Comparison(
            diff=diff or RunDiffWire.from_wire(run_diff(base, variant).wire()),
            base_state=state_at(base), variant_state=state_at(variant))
        if base.finished and variant.finished:
            _COMPARISONS.put(key, result)
    return result


def compare_explain(base: Run, variant: Run) -> str:
    """The ``explain()`` block of two runs' RunDiff, headed by how they relate (a fork
    of the base at its point, or two runs compared)."""
    from forklab.engine.fork.diff import format_run_diff

    fork = state_at(variant).fork
    if fork is not None and fork.base_run_id == base.id:
        point = forked_point(variant.id)
        where = point.label if point else f"seq {variant.fork_sequence_id}"
        header = (f"fork {variant.id} of {base.id} at seq {variant.fork_sequence_id} "
                  f"({where})")
    else:
        header = f"compare {variant.id} with {base.id}"
    return format_run_diff(run_diff(base, variant), header)


def forked_point(run_id: str) -> ForkPointWire | None:
    """The resolved point a fork's ``run.forked`` event names (None: not a fork, or a log
    recorded before events kept their point)."""
    # one small field: the payload also holds the whole prefix state, which SQLite parses
    # again for every field extracted
    point = (Event.objects.filter(run_id=run_id, type="run.forked")
             .values_list(F("payload__point"), flat=True).first())
    return ForkPointWire.from_wire(point) if point else None
