"""A fork's ``run.forked`` row in the Django store: its prefix and its graph by reference.

The engine's ``run.forked`` event carries the fork's prefix state (its base's state at the
point: every execution of the prefix, ~1.2 MB for a 1,000-node chain) and its effective
graph (every node but the changed one, ~0.4 MB). Stored as they are, every fork copies what
its base already holds, and fork storage grows with the base, not the tail. As in
``SqliteStore`` (see :mod:`forklab.engine.sqlite_store`), the row keeps references instead:

- **prefix**: a ``run.forked`` whose ``prefix_ref`` names a run of this database whose log
  is whole from seq 1 to the referenced seq is stored without ``prefix_state``; reading it
  (:func:`restore`; readers of rows use ``forklab.runs.store.restored_payload``) puts back
  that run's log folded to the seq — the state the fork copied, canonically equal (a fork
  of a fork whose prefix is itself by reference reads through it; cached by
  :class:`~forklab.engine.prefix_refs.ReferencedPrefixes`, as in ``SqliteStore``);
- **graph**: when the ``run.started`` appended with it names a graph version stored in the
  fork's project, the graph is stored as its delta against that version
  (:mod:`forklab.engine.graph_delta`). A version is never deleted while a run points at it
  (``Run.graph_version`` is ``RESTRICT``), so the reference cannot go stale. On PostgreSQL
  jsonb keeps no key order, so no delta applies and the copy is kept.

Invariant: before any event of a run is deleted — ``compact``, ``archive``, the run itself
deleted (``forklab.runs.store.on_run_deleted``, a ``pre_delete`` receiver, which cascades
reach too) — every fork referencing it gets its prefix written into its own row
(:func:`materialize_forks_of`), in the same transaction; both that and a fork's append lock the referenced run's row first, so a fork
appended meanwhile is either materialized or finds the log no longer whole and keeps a copy.
A fork never loses its prefix, and reads the same before and after.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from django.db.models import Count, Max, Min, TextField
from django.db.models.functions import Cast

from forklab.engine.canonical import loads
from forklab.engine.errors import SourceMissing
from forklab.engine.events import Event, RunForked, RunStarted
from forklab.engine.graph_delta import StoredVersion, apply_delta, delta
from forklab.engine.prefix_refs import Reader, ReferencedPrefixes
from forklab.runs import models as m

VERSION_CACHE_SIZE = 32  # decoded graph versions kept per process

_prefixes = ReferencedPrefixes()  # per process, runs told apart by their database
_lock = threading.Lock()
# (database, graph version row) -> its spec's text and decoded form; a version never changes
_versions: OrderedDict[tuple[str, int], tuple[str, StoredVersion]] = OrderedDict()


def clear_caches() -> None:
    """Forget every referenced prefix and graph version read (a fresh process's view)."""
    _prefixes.clear()
    with _lock:
        _versions.clear()


def stored_payload(event: RunForked, batch: Sequence[Event], *, project_id: int,
                   using: str) -> dict[str, Any]:
    """The payload stored for ``event`` (inside the append's transaction): its own, minus
    the prefix state when the referenced log is whole here, with the graph as a delta when
    a stored version rebuilds it."""
    ref_run, ref_seq = event.prefix_ref.get("run_id"), event.prefix_ref.get("seq")
    by_reference = (isinstance(ref_run, str) and isinstance(ref_seq, int)
                    and event.prefix_names() == (ref_run, ref_seq)
                    and _whole_log_upto(ref_run, ref_seq, using=using))
    if by_reference:  # never made: a live fork's prefix wire form is deferred until read
        event = dataclasses.replace(event, prefix_state={})
    payload = event.payload()
    if by_reference:
        del payload["prefix_state"]
    started = next((e for e in batch if isinstance(e, RunStarted)), None)
    if started is not None and event.graph.get("id") == started.graph_id:
        version = _stored_version(project_id, started.graph_id, started.graph_version,
                                  using=using)
        if version is not None:
            row, stored = version
            change = delta(event.graph, stored, graph_id=started.graph_id,
                           number=started.graph_version)
            if change is not None:
                del payload["graph"]
                payload["graph_delta"] = {**change, "row": row}
    return payload


def restore(run_id: str, payload: dict[str, Any], *, using: str, read: Reader) -> dict[str, Any]:
    """Put back (in place) what a stored ``run.forked`` payload keeps by reference; the
    payload. A payload stored whole is returned as it is. ``read(run, seq)`` is the store's
    read of a run's events up to ``seq`` (restoring what they keep by reference in turn)."""
    change = payload.pop("graph_delta", None)
    if isinstance(change, dict):
        version = _version_by_row(int(change.pop("row")), using=using)
        if version is None:  # unreachable: a referenced version cannot be deleted
            raise SourceMissing(
                f"fork {run_id!r} stores its graph as a change of graph "
                f"{change.get('graph_id')!r} version {change.get('version')}, which is gone",
                run_id=run_id)
        payload["graph"] = apply_delta(loads(version[0]), change)
    if "prefix_state" not in payload:
        payload["prefix_state"] = _referenced_prefix(run_id, payload.get("prefix_ref") or {},
                                                     using=using, read=read)
    return payload


def materialize_forks_of(run_id: str, *, using: str, read: Reader) -> int:
    """Write the prefix into every fork row kept by reference to ``run_id``'s log (call in
    the transaction that is about to delete some of that log); how many were written."""
    _lock_run(run_id, using=using)
    rows = list(m.Event.objects.using(using)
                .filter(type=RunForked.TYPE, payload__prefix_ref__run_id=run_id)
                .exclude(payload__has_key="prefix_state").values_list("pk", "run_id", "payload"))
    for pk, fork_id, payload in rows:
        payload["prefix_state"] = _referenced_prefix(fork_id, payload["prefix_ref"],
                                                     using=using, read=read)
        m.Event.objects.using(using).filter(pk=pk).update(payload=payload)
    return len(rows)


def _lock_run(run_id: str, *, using: str) -> bool:
    """Lock ``run_id``'s row for this transaction (see the module invariant); whether the
    run exists."""
    return bool(list(m.Run.objects.using(using).select_for_update().filter(pk=run_id)
                     .values_list("pk")))


def _whole_log_upto(run_id: str, seq: int, *, using: str) -> bool:
    """Whether this database holds every event of ``run_id`` from seq 1 to ``seq`` (its row
    locked first: see the module invariant)."""
    if seq <= 0 or not _lock_run(run_id, using=using):
        return False
    found = (m.Event.objects.using(using).filter(run_id=run_id, seq__lte=seq)
             .aggregate(n=Count("pk"), low=Min("seq"), high=Max("seq")))
    return bool(found["n"] == seq and found["low"] == 1 and found["high"] == seq)


def _referenced_prefix(fork_id: str, ref: dict[str, Any], *, using: str,
                       read: Reader) -> dict[str, Any]:
    return _prefixes.state(fork_id, ref, read, where=f"database {using!r}", scope=using)


def _stored_version(project_id: int, graph_id: str, number: int, *,
                    using: str) -> tuple[int, StoredVersion] | None:
    row = (m.GraphVersion.objects.using(using)
           .filter(graph__project_id=project_id, graph__graph_id=graph_id, version=number)
           .values_list("pk", flat=True).first())
    if row is None:
        return None
    found = _version_by_row(row, using=using)
    return None if found is None else (row, found[1])


def _version_by_row(row: int, *, using: str) -> tuple[str, StoredVersion] | None:
    """Graph version row ``row``: its spec's JSON text (decoded afresh for each
    :func:`~forklab.engine.graph_delta.apply_delta`, which uses its dict in place) and the
    version decoded once to make deltas against; None if there is no such row.

    The text is read every time and the decoded version cached by it (compared in full on a
    hit): a row id names one version for good only while ids are never handed out again —
    a database flushed or restored starts them over, and a delta made against another
    version's spec would rebuild the wrong graph in the next process."""
    text = (m.GraphVersion.objects.using(using).filter(pk=row)
            .values_list(Cast("spec", TextField()), flat=True).first())
    if text is None:
        return None
    key = (using, row)
    with _lock:
        found = _versions.get(key)
        if found is not None and found[0] == text:
            _versions.move_to_end(key)
            return found
    found = (text, StoredVersion(loads(text)))
    with _lock:
        _versions[key] = found
        while len(_versions) > VERSION_CACHE_SIZE:
            _versions.popitem(last=False)
    return found
