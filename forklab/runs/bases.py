"""Fork bases, loaded once per process: accepting a fork must not re-read and re-fold its
base run's log on every request of a burst.

A finished run's log does not change, so its loaded form (``engine.fork.core.BaseRun``: the
events, the folded final state, the index of node executions, the graph) is kept in a small
per-process LRU keyed by ``(run id, last seq, archived)``; a hit is shared read-only and gets
the caller's engine environment. Unfinished runs are loaded every time (and refused by the
engine).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace

from forklab.engine.environment import Environment
from forklab.engine.fork.core import BaseRun, load_base
from forklab.runs.models import Run
from forklab.runs.store import DjangoStore

CACHE_SIZE = 16
_cache: OrderedDict[tuple[str, int, bool], BaseRun] = OrderedDict()
_lock = threading.Lock()


def loaded(run: Run, env: Environment) -> BaseRun:
    """``run`` loaded as a fork base, with ``env`` (``load_base``'s errors for a run that
    cannot be one)."""
    key = (str(run.pk), int(run.last_seq), bool(run.archived))
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
    if hit is not None:
        return replace(hit, env=env)
    base = load_base(run.pk, store=DjangoStore(run.project), env=env)
    if run.finished:
        with _lock:
            _cache[key] = base
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    return base


def forget() -> None:
    """Empty the cache (tests that rewrite a finished run's log in place)."""
    with _lock:
        _cache.clear()
