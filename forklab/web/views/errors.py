"""Error pages: plain pages that say what went wrong and where to go, never a traceback.

``error_page`` renders any status with a message (the views use it through
``common.page_errors``, which takes the status from the code map the API uses); the ``handler*`` views serve Django's own errors (an unknown URL, a
crash) when DEBUG is off; :class:`forklab.web.middleware.PlainErrorPages` serves the same
pages to anonymous readers and share links when DEBUG is on.
"""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string

logger = logging.getLogger("forklab.web")

TEMPLATES = {403: "403.html", 404: "404.html"}  # every other status: 400.html with a title
TITLES = {400: "This link is damaged", 401: "Log in first", 403: "Not allowed",
          404: "Nothing here", 405: "Not here", 409: "Not yet", 422: "This cannot be done",
          429: "Too many requests", 502: "A model provider failed",
          503: "Not available right now"}


def error_page(request: HttpRequest, status: int, message: str = "") -> HttpResponse:
    """A forklab error page (marked, so the middleware never replaces it)."""
    response = render(request, TEMPLATES.get(status, "400.html"),
                      {"message": message, "status": status, "title": TITLES.get(status, "")},
                      status=status)
    response.forklab_page = True  # type: ignore[attr-defined]
    return response


def crash_page(request: HttpRequest | None = None) -> HttpResponse:
    """The 500 page: standalone HTML (no base template, which may be what failed)."""
    response = HttpResponse(render_to_string("500.html"), status=500)
    response.forklab_page = True  # type: ignore[attr-defined]
    return response


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_page(request, 400, "The request could not be read.")


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_page(request, 403)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_page(request, 404)


def server_error(request: HttpRequest) -> HttpResponse:
    return crash_page(request)
