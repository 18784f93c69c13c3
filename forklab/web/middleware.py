"""Plain error pages for readers who are not developers, even with DEBUG on.

With DEBUG on, Django answers an unknown URL or a crash with its technical page (URL
patterns, settings, a traceback). That is meant for the developer at the keyboard, never for
an anonymous visitor or someone holding a share link: for those requests a crash is logged
and answered with the plain 500 page, and any other unmarked 404/500 with the plain page.
The API (JSON errors) and the admin are left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from forklab.web.views.errors import crash_page, error_page

logger = logging.getLogger("forklab.web")
SKIPPED = ("/api/", "/admin/", "/metrics", "/static/")


def _plain_for(request: HttpRequest) -> bool:
    if request.path.startswith(SKIPPED):
        return False
    user = getattr(request, "user", None)
    return request.path.startswith("/s/") or user is None or not user.is_authenticated


class PlainErrorPages:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (settings.DEBUG and response.status_code in (404, 500) and _plain_for(request)
                and not getattr(response, "forklab_page", False)):
            return crash_page(request) if response.status_code == 500 else error_page(
                request, 404)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not settings.DEBUG or not _plain_for(request):
            return None  # DEBUG off: handler500 answers; a logged-in developer sees the trace
        logger.error("unhandled error on %s", request.path, exc_info=exception)
        return crash_page(request)
