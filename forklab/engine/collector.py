"""Python's cyclic garbage collector around the engine's allocation-heavy passes.

Two ways to keep the collector out of a hot pass:

- :func:`collector_paused` — off for a bounded pass that builds long-lived structures from
  a whole input (a fold, the fork index, a base load, a graph parse). Reference counting
  still frees everything; only cycle detection waits until the pass ends.
- :class:`YoungOnly` — for a pass of unbounded length (a run's node loop): the automatic
  collector is off, and :meth:`YoungOnly.step`, called once per unit of work (a node), runs
  a collection of the two young generations whenever more than :data:`YOUNG_LIMIT`
  containers were allocated (net) since the last one. So cyclic garbage made during the pass
  is still found within a bounded number of allocations; what the pass skips is the full
  collection that re-scans the whole heap — in a fresh process the first one (20-30 ms over
  the imported modules) tends to fall inside the first recording. Young collections promote
  their survivors to the old generation, so the full collection the automatic collector
  owes comes due once the pass ends, outside the run.

Both leave a collector that was already off off (so they nest), and re-enable one that was
on when they end. The collector is process-wide: two runs in two threads overlap their
pauses harmlessly (the last one out may find it on already; collections still happen).
Known limit: young collections are made at node boundaries, so while one node blocks (a
slow provider call) nothing collects cyclic garbage for the whole process — other threads'
(a web server running runs in-process) included — until that node ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_LIMIT = 20_000
"""Net container allocations between two young collections in :class:`YoungOnly`
(the automatic collector's default first threshold is 2,000 in 3.13, 700 before; the young
generations it scans are what was allocated since, so the work per allocation is the same)."""


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the duration of a fold (or of any pass
    that builds long-lived structures from a whole input: the fork index, a base load).

    A fold allocates many small containers that all stay alive (executions, action records,
    calls), so with the collector on, a long log triggers repeated collections that re-scan
    the whole heap — about half of a 100k-event fold. Reference counting still frees
    everything as usual; only cycle detection is deferred until the fold ends. A collector
    that was already off stays off (so these sections nest).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class YoungOnly:
    """The collector off except for young collections every :data:`YOUNG_LIMIT` net
    allocations, checked at :meth:`step` (see the module docstring). A context manager."""

    __slots__ = ("_owner", "limit", "young_collections")

    def __init__(self, limit: int | None = None) -> None:
        self.limit = YOUNG_LIMIT if limit is None else limit
        self.young_collections = 0
        self._owner = False

    def __enter__(self) -> YoungOnly:
        # Only the section that turned the collector off collects: inside a section that
        # paused it already (a fold, an outer run), it stays as that section wants it.
        self._owner = gc.isenabled()
        gc.disable()
        return self

    def step(self) -> None:
        """Collect the young generations if enough was allocated since the last time."""
        if self._owner and gc.get_count()[0] > self.limit:
            gc.collect(1)
            self.young_collections += 1

    def __exit__(self, *exc: object) -> None:
        if self._owner:
            gc.enable()
