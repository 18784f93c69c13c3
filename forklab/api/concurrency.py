"""Letting a burst of requests to one endpoint overlap instead of queueing.

Under ASGI (daphne) Django runs every synchronous view of a process on one thread
(``thread_sensitive``), so a burst of ``POST /forks/`` is served strictly one after another,
each waiting on its own database round trips while the others wait for it: the p95 of a
100-request burst was the sum of them. :func:`concurrent` turns a (DRF, synchronous) view
into an async one that runs it on the event loop's thread pool instead, so the requests of
a burst overlap their database waits. Each run opens and closes its database connection the
way Django's request cycle does (``close_old_connections``), in its own thread.

Outside ASGI — the test client, WSGI servers — the view runs as before, on the caller's
thread (so a test's transaction sees it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse


def concurrent(view: Callable[..., HttpResponse]) -> Callable[..., Any]:
    """An async view running ``view`` off the process's one sync thread under ASGI."""

    def in_own_thread(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        close_old_connections()
        try:
            response = view(request, *args, **kwargs)
            if hasattr(response, "render"):
                response.render()  # DRF renders lazily: do it here, not on the event loop
            return response
        finally:
            close_old_connections()

    async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not isinstance(request, ASGIRequest):
            return await sync_to_async(view, thread_sensitive=True)(request, *args, **kwargs)
        return await sync_to_async(in_own_thread, thread_sensitive=False)(
            request, *args, **kwargs)

    functools.update_wrapper(wrapper, view)  # keeps DRF's cls/initkwargs and csrf_exempt
    return wrapper
