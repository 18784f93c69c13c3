"""Fork bases, loaded once per process: accepting a fork must not re-read and re-fold its
base run's log on every request of a burst.

A finished run's log does not change, so its loaded form (``engine.fork.core.BaseRun``: the
events, the folded final state, the index of node executions, the graph) is kept in a small
per-process LRU keyed by ``(run id, last seq, archived)``; a hit is shared read-only and gets
the caller's engine environment. Unfinished runs are loaded every time (and refused by the
engine), and so are runs imported from a trace, whose log late spans rewrite.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from forklab.engine.environment import Environment
from forklab.engine.fork.core import BaseRun, load_base
from forklab.runs.models import Run
from forklab.runs.readcache import Lru
from forklab.runs.store import DjangoStore

CACHE_SIZE = 16
_cache: Lru[tuple[str, int, bool], BaseRun] = Lru(CACHE_SIZE)
_loading: dict[tuple[str, int, bool], Any] = {}  # key -> its gate: one loader at a time
_lock = threading.Lock()
_new_gate: Callable[[], Any] = threading.Lock  # (tests watch the gates)


def loaded(run: Run, env: Environment) -> BaseRun:
    """``run`` loaded as a fork base, with ``env`` (``load_base``'s errors for a run that
    cannot be one).

    A burst's first requests for a base all miss at once: one of them loads it and the
    others wait for that load instead of each reading and folding the same log (every
    request thread of a freshly started process did, ~12 ms of CPU each).
    """
    key = (str(run.pk), int(run.last_seq), bool(run.archived))
    hit = _cache.get(key)
    if hit is not None:
        return replace(hit, env=env)
    with _lock:
        gate: Any = _loading.setdefault(key, _new_gate())
    try:
        with gate:
            hit = _cache.get(key)  # loaded by the request this one waited for
            if hit is not None:
                return replace(hit, env=env)
            base = load_base(run.pk, store=DjangoStore(run.project), env=env)
            # an imported run's log is rewritten when late spans arrive, possibly to as many
            # events as before (a late log record filling in content): never cached
            if run.finished and not run.trace_id:
                _cache.put(key, base)
            return base
    finally:
        with _lock:
            if not gate.locked() and _loading.get(key) is gate:
                del _loading[key]


def forget() -> None:
    """Empty the cache (tests that rewrite a finished run's log in place)."""
    _cache.clear()
    with _lock:
        _loading.clear()
