"""Django's ASGI handler, with each request's sync thread taken from a set of idle ones.

Django serves every HTTP request in its own ``ThreadSensitiveContext``: the sync parts of
the request (its signals, the sync middleware, a sync view) run on one thread reserved for
that request. By default that thread is created for the request and joined — from yet
another new thread — when it ends: two thread starts per request, a large share of a small
request's CPU (about a third of ``/healthz``), and a burst of 100 ``POST /forks/`` pays
them 100 times over while it competes for the same cores.

:class:`ReusingASGIHandler` hands each request a single-thread executor from a set of idle
ones instead (asgiref's ``ThreadSensitiveContext(executor=...)``, made for this), and puts
it back afterwards, keeping at most ``idle`` of them. Nothing waits for an executor: when
none is idle a new one is made, so concurrency is what it was. A reused thread is what a
WSGI server gives every request: Django resets its per-request state on each request, and
closes the thread's database connections at the end of it (``request_finished``).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.core.handlers.asgi import ASGIHandler

DEFAULT_IDLE = 32


class RequestExecutor(ThreadPoolExecutor):
    """One thread; counts the work submitted to it that has not finished yet."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="forklab-request")
        self._busy = 0
        self._busy_lock = threading.Lock()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        with self._busy_lock:
            self._busy += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: Any) -> None:
        with self._busy_lock:
            self._busy -= 1

    @property
    def idle(self) -> bool:
        with self._busy_lock:
            return self._busy == 0


class IdleExecutors:
    """Single-thread executors, reused: ``take`` one (a new one if none is idle) and
    ``give`` it back — kept only while fewer than ``idle`` are kept and nothing runs on it
    any more (a request whose client went away may leave sync work running: that thread
    finishes it and ends). Thread-safe."""

    def __init__(self, idle: int = DEFAULT_IDLE) -> None:
        self.idle = idle
        self._free: list[RequestExecutor] = []
        self._lock = threading.Lock()
        self.made = 0  # executors created so far (tests and benchmarks read it)

    def take(self) -> RequestExecutor:
        with self._lock:
            if self._free:
                return self._free.pop()
            self.made += 1
        return RequestExecutor()

    def give(self, executor: RequestExecutor) -> None:
        with self._lock:
            if executor.idle and len(self._free) < self.idle:
                self._free.append(executor)
                return
        executor.shutdown(wait=False)  # its thread ends once idle; nobody waits for it


class ReusingASGIHandler(ASGIHandler):
    """``ASGIHandler`` whose requests run their sync work on reused threads."""

    def __init__(self, idle: int = DEFAULT_IDLE) -> None:
        super().__init__()
        self.executors = IdleExecutors(idle)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)  # Django's own refusal
            return
        executor = self.executors.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self.executors.give(executor)


def get_asgi_application() -> ReusingASGIHandler:
    """``django.core.asgi.get_asgi_application`` with the reusing handler."""
    import django

    django.setup(set_prefix=False)
    return ReusingASGIHandler()
