"""``forklab.serving``: HTTP requests on a bounded set of reused threads.

Requests go through the real handler and middleware (no socket). The view used here waits
on a barrier, so a test fails (the barrier breaks: a 500) unless the requests really run
their sync work at the same time; the bound itself is tested on ``RequestThreads`` in one
event loop, where "has not got a thread yet" is deterministic.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from django.http import HttpRequest, JsonResponse
from django.test import override_settings
from django.urls import path

from forklab.serving import RequestThreads, ThreadedASGIHandler

AT_ONCE = 4
barrier = threading.Barrier(AT_ONCE, timeout=10)
seen_threads: set[int] = set()


def together(request: HttpRequest) -> JsonResponse:
    """A sync view that returns only once AT_ONCE requests are inside it."""
    seen_threads.add(threading.get_ident())
    barrier.wait()
    return JsonResponse({"ok": True})


urlpatterns = [path("together/", together)]


async def get(handler: ThreadedASGIHandler, url: str) -> int:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": url, "raw_path": url.encode(),
             "query_string": b"", "root_path": "", "headers": [(b"host", b"testserver")],
             "client": ("127.0.0.1", 5000), "server": ("testserver", 80)}
    request_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError

    status: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await handler(scope, receive, send)
    return status[0]


async def burst(handler: ThreadedASGIHandler) -> list[int]:
    return list(await asyncio.gather(*(get(handler, "/together/") for _ in range(AT_ONCE))))


@override_settings(ROOT_URLCONF=__name__)
def test_requests_run_their_sync_views_at_the_same_time_up_to_the_bound() -> None:
    handler = ThreadedASGIHandler(threads=AT_ONCE)
    assert asyncio.run(burst(handler)) == [200] * AT_ONCE


@override_settings(ROOT_URLCONF=__name__)
def test_the_next_burst_runs_on_the_threads_of_the_first() -> None:
    handler = ThreadedASGIHandler(threads=AT_ONCE)
    seen_threads.clear()
    assert asyncio.run(burst(handler)) == [200] * AT_ONCE
    first = set(seen_threads)
    assert asyncio.run(burst(handler)) == [200] * AT_ONCE
    assert seen_threads == first and len(first) == AT_ONCE
    assert handler.threads.made == AT_ONCE


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_request_past_the_bound_waits_for_a_thread_given_back() -> None:
    async def scenario() -> None:
        threads = RequestThreads(2)
        first, second = await threads.take(), await threads.take()
        third = asyncio.ensure_future(threads.take())
        await settle()
        assert not third.done()  # both threads are taken: it waits, holding nothing
        threads.give(second)
        assert await third is second
        assert threads.made == 2
        threads.give(first)
        threads.give(second)

    asyncio.run(scenario())


def test_a_thread_still_running_work_is_retired_and_replaced() -> None:
    async def scenario() -> None:
        threads = RequestThreads(1)
        busy, release = await threads.take(), threading.Event()
        busy.submit(release.wait)  # its request's client went away; the work goes on
        waiting = asyncio.ensure_future(threads.take())
        await settle()
        threads.give(busy)
        fresh = await waiting
        assert fresh is not busy and threads.made == 2
        release.set()
        threads.give(fresh)

    asyncio.run(scenario())


def test_a_waiter_that_gave_up_passes_the_thread_on() -> None:
    async def scenario() -> None:
        threads = RequestThreads(1)
        only = await threads.take()
        quitter = asyncio.ensure_future(threads.take())
        patient = asyncio.ensure_future(threads.take())
        await settle()
        quitter.cancel()
        threads.give(only)
        assert await patient is only
        assert quitter.cancelled()

    asyncio.run(scenario())


def test_a_websocket_scope_is_not_served_as_http() -> None:
    handler = ThreadedASGIHandler(threads=1)

    async def nothing() -> dict[str, Any]:
        raise AssertionError

    async def ignore(message: dict[str, Any]) -> None:
        raise AssertionError

    with pytest.raises(ValueError, match="only handle ASGI/HTTP"):
        asyncio.run(handler({"type": "websocket"}, nothing, ignore))


def test_warming_up_builds_the_url_tables_and_freezes_the_start_up_heap() -> None:
    import gc

    from django.urls import clear_url_caches, get_resolver

    from forklab.engine.collector import thaw_heap
    from forklab.serving import warm_up

    clear_url_caches()
    assert not get_resolver()._populated  # type: ignore[attr-defined]
    try:
        warm_up()
        assert get_resolver()._populated  # type: ignore[attr-defined]
        assert gc.get_freeze_count() > 0
    finally:
        thaw_heap()
