"""Django's ASGI handler, serving HTTP requests on a fixed set of reused threads.

Django serves every HTTP request in its own ``ThreadSensitiveContext``: the sync parts of
the request (its signals, the sync middleware, a sync view) run on one thread reserved for
that request. By default that thread is created for the request and joined — from yet
another new thread — when it ends, and nothing bounds how many exist at once: a burst of
100 ``POST /forks/`` on one process ran 100 threads with 100 database connections
(PostgreSQL refuses connections past ``max_connections``), all of them competing for the
same cores and all finishing late.

:class:`ThreadedASGIHandler` serves them the way a threaded WSGI server does: at most
``threads`` requests run their sync work at once, each on a single-thread executor taken
from a fixed set and given back afterwards (asgiref's ``ThreadSensitiveContext(executor=...)``
is made for this); the others wait their turn on the event loop, holding no thread and no
connection. Requests still overlap their database waits, threads are made once, and a
thread's database connection can outlive a request (``FORKLAB_CONN_MAX_AGE``). Django resets
its per-request state on every request, as it does under WSGI. Websockets are not affected.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler


class RequestExecutor(ThreadPoolExecutor):
    """One thread; knows whether work submitted to it is still running."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="forklab-request")
        self._busy = 0
        self._busy_lock = threading.Lock()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._busy_lock:
            self._busy += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: Future[Any]) -> None:
        with self._busy_lock:
            self._busy -= 1

    @property
    def idle(self) -> bool:
        with self._busy_lock:
            return self._busy == 0


class RequestThreads:
    """At most ``size`` request executors, made on demand and reused.

    ``take`` returns an idle one, makes one while fewer than ``size`` exist, or waits (on
    the caller's event loop) until one is given back. ``give`` hands it to the longest
    waiter or keeps it idle. An executor given back while still running work — a request
    whose client went away leaves its sync work running — is retired (its thread finishes
    the work and ends) and a new one may be made in its place. Thread-safe.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("a web process needs at least one request thread")
        self.size = size
        self.made = 0  # executors made so far (tests and benchmarks read it)
        self._live = 0
        self._idle: list[RequestExecutor] = []
        self._waiters: deque[asyncio.Future[RequestExecutor | None]] = deque()
        self._lock = threading.Lock()

    async def take(self) -> RequestExecutor:
        while True:
            with self._lock:
                if self._idle:
                    return self._idle.pop()
                if self._live < self.size:
                    self._live += 1
                    self.made += 1
                    return RequestExecutor()
                waiter: asyncio.Future[RequestExecutor | None] = (
                    asyncio.get_running_loop().create_future())
                self._waiters.append(waiter)
            try:
                executor = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._pass_on(waiter.result())  # handed to us as we were cancelled
                raise
            if executor is not None:
                return executor
            # None: a retired executor freed a place; take it (or queue again)

    def give(self, executor: RequestExecutor) -> None:
        if executor.idle:
            self._pass_on(executor)
            return
        executor.shutdown(wait=False)
        with self._lock:
            self._live -= 1
        self._pass_on(None)

    def _pass_on(self, executor: RequestExecutor | None) -> None:
        """To the longest waiter: ``executor``, or (None) the news that a place is free."""
        with self._lock:
            while self._waiters:
                if self._hand(self._waiters.popleft(), executor):
                    return
            if executor is not None:
                self._idle.append(executor)

    @staticmethod
    def _hand(waiter: asyncio.Future[RequestExecutor | None],
              executor: RequestExecutor | None) -> bool:
        """Resolve ``waiter`` with ``executor`` on its loop; False if it was cancelled."""
        if waiter.done():
            return False
        loop = waiter.get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            waiter.set_result(executor)
        else:
            loop.call_soon_threadsafe(_resolve, waiter, executor)
        return True


def _resolve(waiter: asyncio.Future[Any], executor: Any) -> None:
    if not waiter.done():
        waiter.set_result(executor)


class ThreadedASGIHandler(ASGIHandler):
    """``ASGIHandler`` running each request's sync work on one of ``threads`` reused
    threads (``FORKLAB_WEB_THREADS``)."""

    def __init__(self, threads: int | None = None) -> None:
        super().__init__()
        self.threads = RequestThreads(threads or settings.FORKLAB_WEB_THREADS)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)  # Django's own refusal
            return
        executor = await self.threads.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self.threads.give(executor)


def get_asgi_application() -> ThreadedASGIHandler:
    """``django.core.asgi.get_asgi_application`` with the threaded handler."""
    import django

    django.setup(set_prefix=False)
    return ThreadedASGIHandler()
