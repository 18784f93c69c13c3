"""A finished run's ``FinalState`` row; a fork's kept compact, by reference to its base's.

``FinalState`` is a projection cache (the log stays the truth): the folded state of a
finished run, written with the event that finished it, so diff pages and fork setup read
one row instead of folding thousands of events. A fork's state inherits its base's
executions and calls, so stored whole every fork's row would copy its base's: 1.03 of the
1.09 MB a fork before the last node of a 1,000-node chain stores. A fork's row therefore
keeps the longest leading run of its executions, and of its calls, that are the same JSON
as its base's stored final state's by reference::

    "inherited": {"run_id": B, "version": V, "executions": K, "calls": C}

with ``executions`` and ``calls`` holding only the items after the first ``K`` and ``C``.
:func:`load` puts them back from run ``B``'s row (itself restored: a fork of a fork reads
through its base's row), which the column ``FinalState.base`` names so the rows depending
on a run are found by an index.

Invariants:

- **verified when written**: an item is kept by reference only if its JSON (keys sorted,
  types exact) equals the base row's item at the same position. Nothing is assumed about
  what a fork's tail can touch (parallel branches in flight at the fork point, a fork of a
  fork), so the restored state is the state written, canonically equal;
- **a miss, never a wrong state**: a row is restored only while its base's row still has
  version ``V``; otherwise (a row edited behind the store's back) :func:`load` returns None
  and the caller folds the log, as for a run that has no row;
- **the base's row outlives its dependents' references**: before a row is rewritten, or its
  run deleted (``forklab.runs.store.on_run_deleted``; cascades reach it too), every row
  referencing it is written whole (:func:`materialize_dependents`), in the same
  transaction. Compacting or archiving a base deletes events, not its row, so a fork keeps
  reading its final state from it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, NamedTuple

import orjson
from django.db.models import TextField
from django.db.models.functions import Cast

from forklab.engine.canonical import loads
from forklab.engine.state import RunState
from forklab.runs import models as m

INHERITED = "inherited"  # the key of a compact row's reference to its base's row
_REFERENCED = ("executions", "calls")  # the lists a compact row keeps by reference
BASE_CACHE_SIZE = 4  # base rows whose items are kept per process (a sweep forks one base)
_MAX_DEPTH = 64  # forks of forks a read follows before it gives up (and folds instead)

_lock = threading.Lock()
# (database, run) -> its row's text, and each referenced list's items as sorted-key JSON
_base_items: OrderedDict[tuple[str, str], tuple[str, dict[str, list[bytes]]]] = OrderedDict()


def clear_caches() -> None:
    """Forget every base row's items read (a fresh process's view)."""
    with _lock:
        _base_items.clear()


def write(run_id: str, state: RunState, *, using: str) -> None:
    """Store ``state``, the finished run's folded state (inside the append's transaction):
    a fork's row compact when its base's row is here, any row's dependents written whole
    first if it is being rewritten."""
    wire = state.to_wire()
    base_id = None
    if state.fork is not None and state.fork.base_run_id:
        base_id = _compact(wire, state.fork.base_run_id, using=using)
    rows = m.FinalState.objects.using(using)
    if rows.filter(run_id=run_id).exists():
        materialize_dependents(run_id, using=using)
    rows.update_or_create(run_id=run_id, defaults={"version": state.version, "state": wire,
                                                   "base_id": base_id})


def load(run_id: str, *, using: str, version: int | None = None) -> RunState | None:
    """The run's stored final state (of its last seq ``version`` when given), restored;
    None when there is no such row or a compact row's base row is no longer the one it
    references (see the module invariants: the caller folds the log instead)."""
    wire = load_wire(run_id, using=using, version=version)
    return None if wire is None else RunState.from_wire(wire, owned=True)


def load_wire(run_id: str, *, using: str, version: int | None = None) -> dict[str, Any] | None:
    """:func:`load`'s wire form, freshly decoded (the caller's to keep)."""
    row = _row(run_id, using=using)
    if row is None or (version is not None and row.version != version):
        return None
    return _restored(row, using=using, depth=0)


def materialize_dependents(run_id: str, *, using: str) -> int:
    """Write whole every row kept by reference to ``run_id``'s (call in the transaction
    about to rewrite or delete it); how many were written. A dependent whose reference no
    longer holds is deleted instead: a miss either way, and the next read folds its log."""
    rows = m.FinalState.objects.using(using)
    written = 0
    for dependent in rows.filter(base_id=run_id).values_list("run_id", flat=True):
        wire = load_wire(dependent, using=using)
        if wire is None:
            rows.filter(run_id=dependent).delete()
        else:
            rows.filter(run_id=dependent).update(state=wire, base_id=None)
            written += 1
    return written


def _compact(wire: dict[str, Any], base_id: str, *, using: str) -> str | None:
    """Replace (in place) ``wire``'s leading items that equal its base row's by a reference
    to that row; the base run's id if any were, else None (``wire`` unchanged)."""
    row = _row(base_id, using=using)
    items = None if row is None else _items_of(row, using=using)
    if row is None or items is None:
        return None
    kept = {name: _leading_same(wire[name], items[name]) for name in _REFERENCED}
    if not any(kept.values()):
        return None
    for name, count in kept.items():
        del wire[name][:count]
    wire[INHERITED] = {"run_id": base_id, "version": row.version, **kept}
    return base_id


def _leading_same(own: list[Any], base: list[bytes]) -> int:
    """How many of ``own``'s first items have the JSON of ``base``'s (sorted keys; an item
    orjson refuses, such as an integer wider than 64 bits, counts as different)."""
    count = 0
    for item, stored in zip(own, base, strict=False):
        if _sorted_json(item) != stored:
            break
        count += 1
    return count


def _sorted_json(item: Any) -> bytes | None:
    try:
        return orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None


def _items_of(row: _Row, *, using: str) -> dict[str, list[bytes]] | None:
    """The referenced lists of ``row`` (restored), each item as sorted-key JSON; None if
    the row cannot be restored. Cached by the row's very text (compared in full on a hit),
    so a row rewritten, or a run id used again, is never compared against what an older
    row held."""
    key = (using, row.run_id)
    with _lock:
        found = _base_items.get(key)
        if found is not None and found[0] == row.text:
            _base_items.move_to_end(key)
            return found[1]
    wire = _restored(row, using=using, depth=0)
    if wire is None:
        return None
    items = {name: [_sorted_json(item) or b"" for item in wire.get(name, ())]
             for name in _REFERENCED}
    with _lock:
        _base_items[key] = (row.text, items)
        while len(_base_items) > BASE_CACHE_SIZE:
            _base_items.popitem(last=False)
    return items


def _restored(row: _Row, *, using: str, depth: int) -> dict[str, Any] | None:
    """``row``'s state decoded, with what it keeps by reference put back; None when the
    referenced row is gone (the ``base`` column no longer names it) or no longer the
    version referenced."""
    wire: dict[str, Any] = loads(row.text)
    ref = wire.pop(INHERITED, None)
    if ref is None:
        return wire
    base_row = (None if row.base_id is None or row.base_id != ref.get("run_id")
                or depth >= _MAX_DEPTH else _row(row.base_id, using=using))
    if base_row is None or base_row.version != ref.get("version"):
        return None
    base = _restored(base_row, using=using, depth=depth + 1)
    if base is None:
        return None
    for name in _REFERENCED:
        count = int(ref.get(name) or 0)
        inherited = base.get(name, [])
        if len(inherited) < count:
            return None
        wire[name] = inherited[:count] + wire.get(name, [])
    return wire


class _Row(NamedTuple):
    run_id: str
    version: int
    text: str  # the state's JSON text
    base_id: str | None


def _row(run_id: str, *, using: str) -> _Row | None:
    """Run ``run_id``'s row."""
    found = (m.FinalState.objects.using(using).filter(run_id=run_id)
             .values_list("version", Cast("state", TextField()), "base_id").first())
    return None if found is None else _Row(run_id, int(found[0]), str(found[1]), found[2])

