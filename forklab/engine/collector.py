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
            gc.enable()  # first: whatever interrupts the promotion must not leave it off
            _promote_survivors()


def _promote_survivors() -> None:
    """Move every object the collector tracks into its oldest generation, without a scan.

    Everything a paused pass built and kept is young when the pass ends, so the first
    young collection after it walked all of it (a fork's base load: ~40k objects, ~13 ms
    of a worker-0 fork's CPU) only to promote it, and the next middle collection walked it
    again. ``gc.freeze()`` then ``gc.unfreeze()`` moves the young and middle generations
    into the oldest one by splicing the collector's lists: constant time. Nothing is
    exempted from collection: a cycle among these objects (or any other young object,
    from any thread) that becomes garbage is found by the next full collection instead of
    a young one. Refcounting frees everything else as ever.

    Skipped once the process froze its heap through :func:`freeze_heap` (a web process
    freezes its start-up heap, ``forklab.serving``): ``gc.unfreeze`` would hand it back to
    the collector. That is tracked here, not asked of the collector, because
    ``gc.get_freeze_count()`` walks the whole frozen heap (a test process that imported
    the ASGI application spent most of its CPU there, once per section). A heap frozen
    with ``gc.freeze()`` directly is unfrozen by the next section: freeze through
    :func:`freeze_heap`. What CPython 3.12 itself leaves frozen at start-up (~375
    immortal tuples) is unfrozen by the first promotion, harmlessly (immortal objects are
    never found to be garbage).
    """
    if not _heap_frozen:
        gc.freeze()
        gc.unfreeze()


_heap_frozen = False
"""Whether :func:`freeze_heap` froze this process's heap (and :func:`thaw_heap` did not
thaw it since)."""


def freeze_heap() -> None:
    """Collect, then put everything alive out of the collector's reach for good
    (``gc.freeze``): a long-lived process's start-up heap. Sections stop promoting their
    survivors from then on (see :func:`_promote_survivors`)."""
    global _heap_frozen
    gc.collect()
    gc.freeze()
    _heap_frozen = True


def thaw_heap() -> None:
    """Undo :func:`freeze_heap` (tests)."""
    global _heap_frozen
    gc.unfreeze()
    _heap_frozen = False
