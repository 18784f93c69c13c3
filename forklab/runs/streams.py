"""Tailing a run's event log for a websocket: backlog by seq, then live (SPEC §4.4).

The event log is the truth. A :class:`RunTail` remembers the last seq it handed out and, each
time it is pumped (once for the backlog, then on every wake-up), reads the log after that seq
— so no seq is sent twice and none is skipped, whatever wake-ups were coalesced, duplicated or
lost. Why reading "after the last seq" cannot skip one: a run's events are appended one
transaction at a time under the run row's lock, so the committed log is always a prefix
``1..last_seq``; each read is bounded by the ``last_seq`` read in the same query round, from
the row whose projection (status) commits with the events.

All ORM work runs on the streams' own small thread pool (:func:`on_stream_threads`,
``FORKLAB_WS_DB_THREADS``), never on the event loop; the tail itself is async. Channels'
``database_sync_to_async`` would run it on asgiref's **one** sync thread per process: under
a burst of viewers every connect's access check and backlog page waited in that one line,
longer than the server's websocket handshake timeout, and the clients reconnected into the
same line (a reconnect storm).
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import wraps
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from forklab.runs import queries, store
from forklab.runs.access import User
from forklab.runs.models import Event, Run, RunStatus
from forklab.runs.serializers_json import iso, readable_payload

#: statuses after which the stream reports the run's status (the socket stays open: a paused
#: fork continues when answered, and a client may want to keep watching).
REPORTED_STATUSES = frozenset({
    RunStatus.PAUSED, RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.BLOCKED,
    RunStatus.CANCELLED,
})
BATCH = 500
EVENT_FIELDS = ("seq", "type", "node", "occurrence", "iteration", "payload", "at")


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def stream_threads() -> ThreadPoolExecutor:
    """The process's pool for stream database work (made on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=settings.FORKLAB_WS_DB_THREADS,
                                       thread_name_prefix="forklab-stream-db")
        return _pool


def on_stream_threads[**P, R](func: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """``func`` as a coroutine function run on :func:`stream_threads`, with Django's
    connection hygiene around it (as ``database_sync_to_async``): each call is independent
    (autocommit, no transaction spans two calls), so which thread runs it does not matter."""

    @wraps(func)
    def hygienic(*args: P.args, **kwargs: P.kwargs) -> R:
        close_old_connections()
        try:
            return func(*args, **kwargs)
        finally:
            close_old_connections()

    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        return await sync_to_async(hygienic, thread_sensitive=False,
                                   executor=stream_threads())(*args, **kwargs)

    return wraps(func)(call)


@dataclass(frozen=True)
class Page:
    """Events after some seq (at most ``BATCH``), and the run's status at ``last_seq``."""

    events: list[dict[str, Any]]
    status: str
    last_seq: int

    @property
    def complete(self) -> bool:
        """True when this page reaches the run's last seq (nothing more to read now)."""
        return not self.events or self.events[-1]["seq"] >= self.last_seq


@on_stream_threads
def readable_run(run_id: str, user: User) -> str:
    """The run's id if ``user`` may read it; raises ``not_found`` otherwise."""
    return queries.get_run(run_id, user=user).id


def read_page(run_id: str, after: int, limit: int = BATCH) -> Page:
    """Events with ``after < seq <= last_seq`` in seq order, plus the status at ``last_seq``.

    The row is read first: events committed after it are left for the next page, so the
    status returned never runs ahead of the events returned with it.
    """
    row = Run.objects.filter(pk=run_id).values_list("status", "last_seq").first()
    if row is None:  # deleted while streaming: nothing more will come
        return Page(events=[], status=RunStatus.CANCELLED, last_seq=after)
    status, last_seq = row
    rows = (Event.objects.filter(run_id=run_id, seq__gt=after, seq__lte=last_seq)
            .order_by("seq").values_list(*EVENT_FIELDS)[:limit])
    # the Event JSON shape (serializers_json.event_to_json) without building model instances
    events = [dict(zip(EVENT_FIELDS, row, strict=True)) for row in rows]
    for event in events:
        event["at"] = iso(event["at"])
        event["payload"] = readable_payload(
            store.restored_payload(run_id, event["type"], event["payload"]))
    return Page(events=events, status=status, last_seq=last_seq)


aread_page = on_stream_threads(read_page)


class RunTail:
    """The position of one stream in one run's log.

    ``pump()`` yields every event after the last one yielded, in seq order, then a
    ``stream.status`` message when the run's status changed since the last one reported: a
    paused or finished status at once, an active one (queued, running) only once it differs
    from what the stream first saw — so a stream opened on a queued fork hears ``running``
    when its tail starts, and ``running`` again when an answered gate lets it go on.
    """

    def __init__(self, run_id: str, *, after: int = 0, seen: str | None = None) -> None:
        """``seen``: the active status the client already shows (a page rendered while the
        run was queued); any other status is reported at once, even an active one. A finished
        status is always reported (the client turns to the result on it)."""
        self.run_id = run_id
        self.sent = max(0, after)
        active = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.PAUSED)
        self.reported: str | None = seen if seen in active else None

    def stale(self, seq: int | None) -> bool:
        """True when a wake-up for ``seq`` announces nothing this tail has not sent."""
        return seq is not None and 0 < seq <= self.sent

    async def pump(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            page = await aread_page(self.run_id, self.sent)
            for event in page.events:
                self.sent = event["seq"]
                yield event
            if page.complete:
                break
        if page.status == self.reported:
            return
        quiet = self.reported is None and page.status not in REPORTED_STATUSES
        self.reported = page.status
        if not quiet:
            yield {"type": "stream.status", "status": page.status, "last_seq": page.last_seq}
