"""The prefix state a fork keeps by reference: a run's log folded to a seq, cached as text.

Both durable stores keep a fork's ``run.forked`` without its ``prefix_state`` when the
referenced run's log is whole in the store (``SqliteStore``; the Django store's
``forklab.runs.forked_rows``), and put it back on read from that log. A run's state at a seq
never changes (logs are append-only; a log about to lose events first has its forks copy
their prefix in), so a cached entry never goes stale: entries are kept as JSON text, newest
last, at most ``max_chars`` in all (the newest is always kept), and every read gets a fresh
object it owns.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from forklab.engine.canonical import loads
from forklab.engine.errors import SourceMissing
from forklab.engine.events import AnyEvent
from forklab.engine.reducers import fold

PREFIX_CACHE_CHARS = 64 * 1024 * 1024  # JSON text of referenced prefixes kept per cache

#: a store's read of a run's events up to a seq (``store.read(run, upto=seq)``)
Reader = Callable[[str, int], list[AnyEvent]]


class ReferencedPrefixes:
    """Referenced prefix states, folded once and kept as JSON text (thread-safe)."""

    def __init__(self, max_chars: int = PREFIX_CACHE_CHARS) -> None:
        self.max_chars = max_chars
        self._lock = threading.Lock()
        self._texts: OrderedDict[Hashable, str] = OrderedDict()

    def clear(self) -> None:
        with self._lock:
            self._texts.clear()

    def state(self, fork_id: str, ref: dict[str, Any], read: Reader, *, where: str,
              scope: Hashable = None) -> dict[str, Any]:
        """Run ``ref["run_id"]``'s state at ``ref["seq"]`` in wire form, its log read with
        ``read`` and folded; ``scope`` tells apart runs of several databases sharing the
        cache, ``where`` names the store in the error for a log that is gone."""
        run_id, seq = str(ref.get("run_id")), int(ref.get("seq") or 0)
        key = (scope, run_id, seq)
        with self._lock:
            text = self._texts.get(key)
            if text is not None:
                self._texts.move_to_end(key)
        if text is not None:
            decoded: dict[str, Any] = loads(text)
            return decoded
        events = read(run_id, seq)
        if not events or events[0].seq != 1 or events[-1].seq != seq:
            raise SourceMissing(  # unreachable unless the store was edited behind its back
                f"fork {fork_id!r} stores its prefix by reference to run {run_id!r} up to seq "
                f"{seq}, and those events are not in {where}", run_id=fork_id)
        wire = fold(events).to_wire()
        text = json.dumps(wire, ensure_ascii=False)
        with self._lock:
            self._texts[key] = text
            while sum(map(len, self._texts.values())) > self.max_chars and len(self._texts) > 1:
                self._texts.popitem(last=False)
        return wire
