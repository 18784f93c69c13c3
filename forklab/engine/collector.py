"""Python's cyclic garbage collector around the engine's bounded, allocation-heavy passes.

:func:`collector_paused` turns it off for a bounded pass that builds long-lived structures
from a whole input (a fold, the fork index, a base load, a graph parse, a graph's store and
hash, its nodes' fingerprint parts). Reference counting still frees everything; only cycle detection waits until the pass
ends. It leaves a collector that was already off off (so sections nest) and re-enables one
that was on. The collector is process-wide: two passes in two threads overlap their pauses
harmlessly (the last one out may find it on already; collections still happen).

A run's node loop is deliberately *not* such a pass: it is unbounded (a node may wait
minutes on a provider), and a server runs runs in threads beside its requests, so pausing
the collector there would leave the whole process without cycle detection for as long as a
call takes. A burst of served nodes in a fork tail (consecutive memo hits, one
``node.reused`` event each; ``Runner._serve_burst``) is such a pass: it calls nothing, and
serves each execution of the recording it reads at most once. A fresh process pays its
first full collection (20-30 ms over the imported modules) inside its first recording;
long-lived processes pay it once (web processes freeze their start-up heap,
``forklab.serving``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


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
