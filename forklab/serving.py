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

Each request's sync work is also **one** hop to its thread. Django's own ASGI handler runs
an async middleware chain: ``request_started`` receivers on the thread, back to the event
loop, the outer (sync-only) middleware on the thread, back to the loop for the inner chain,
the view on the thread, back, and ``response.close`` on the thread again — five or six
cross-thread hand-overs, each waking the event loop and passing the GIL, which under a burst
cost more CPU than a small view. Every view and middleware here is sync, so the handler
builds Django's *sync* chain (as the WSGI handler does) and runs ``request_started``, the
chain, and — for a response whose body is already in memory — ``close``
(``request_finished``) in a single call on the request's thread; only reading the body and
sending the response stay on the loop. A streaming response is closed after it is sent, as
Django does.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse, HttpResponseBase
from django.urls import set_script_prefix

from forklab.engine.collector import freeze_heap


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
    """``ASGIHandler`` running each request's sync work — signals, the sync middleware
    chain, the view, closing an in-memory response — as one call on one of ``threads``
    reused threads (``FORKLAB_WEB_THREADS``)."""

    def __init__(self, threads: int | None = None) -> None:
        base.BaseHandler.__init__(self)
        self.load_middleware(is_async=False)  # the WSGI handler's chain: no async hops
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

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Django's ``ASGIHandler.handle`` with the sync work in one thread hop.

        A client that disconnects while its request runs no longer cancels anything: the
        sync view was never cancellable (Django leaves its thread running too); the
        response is then sent to a closed connection, which the server drops.
        """
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        with body_file:
            response = await sync_to_async(self.serve, thread_sensitive=True)(scope, body_file)
            await self.send_response(response, send)
            if response.streaming:
                await sync_to_async(response.close, thread_sensitive=True)()

    def serve(self, scope: dict[str, Any], body_file: Any) -> HttpResponseBase:
        """On the request's thread: the request's whole sync life up to sending."""
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
            response._handler_class = self.__class__  # type: ignore[attr-defined]
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size
        assert response is not None
        if not response.streaming:
            response.close()  # the body is in memory: request_finished runs here, not later
        return response


def warm_up() -> None:
    """Do at start-up what a process otherwise does during its first requests.

    - Import the URLconf — and with it every view, serializer and schema module — and build
      its lookup tables: Django does that on the first request, ~80-100 ms of CPU (more
      than ten accepts), paid inside whatever burst reached a fresh process first.
    - Move everything alive now (modules, classes, settings: the bulk of the heap, never
      freed) out of the cyclic collector's reach (the engine's ``freeze_heap``:
      ``gc.freeze``), so its full collections walk only what requests allocate — one full
      pass over a warmed-up process's heap cost ~100 ms of CPU, and came during a burst.
    """
    from django.urls import get_resolver

    resolver = get_resolver()
    _ = resolver.reverse_dict  # imports the URLconf and builds the reverse lookup tables
    for pattern in resolver.url_patterns:  # included URLconfs build theirs on first use
        _ = getattr(pattern, "reverse_dict", None)
    freeze_heap()


def get_asgi_application() -> ThreadedASGIHandler:
    """``django.core.asgi.get_asgi_application`` with the threaded handler, warmed up."""
    import django

    django.setup(set_prefix=False)
    handler = ThreadedASGIHandler()
    warm_up()
    return handler
