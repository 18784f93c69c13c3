"""What every dashboard view shares: error pages, partial-or-page rendering, roles."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.middleware import HtmxDetails

from forklab.engine.errors import ForklabError
from forklab.runs import queries
from forklab.runs.access import PermissionDenied, role_in
from forklab.runs.error_status import status_for
from forklab.runs.models import Project, Role, Run
from forklab.web.views.errors import error_page

logger = logging.getLogger("forklab.web")


class HtmxHttpRequest(HttpRequest):
    """A request as views see it: django-htmx's middleware (always installed) adds ``htmx``."""

    htmx: HtmxDetails

View = Callable[..., HttpResponse]


def page_errors(view: View) -> View:
    """Any ``ForklabError`` escaping the view → the error page with its message, at the
    status the API answers for the same code (``runs.error_status``): ``not_found`` 404,
    ``permission_denied`` 403, ``invalid_argument`` 400, ``run_in_progress`` 409, a fork the
    run cannot take 422, …; never a 500 for what the user asked.

    A run outside the user's projects is ``not_found`` in the use cases already, so the page
    never confirms that it exists.
    """

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except ForklabError as exc:
            status = status_for(exc.code)
            if status >= 500:  # the server's side (a provider, the database): worth a look
                logger.warning("%s on %s: %s", exc.code, request.path, exc.message)
            return error_page(request, status, exc.message)

    return wrapped


def htmx_target(request: HttpRequest) -> str | None:
    """The id of the element an htmx request swaps into (None for a plain request)."""
    htmx = getattr(request, "htmx", None)
    return htmx.target if htmx else None


def page_or_partial(request: HttpRequest, template: str, context: dict[str, Any],
                    partials: tuple[str, ...] = (), status: int = 200) -> HttpResponse:
    """The full page, or ``template#<target>`` when htmx asks to swap one of ``partials``."""
    target = htmx_target(request)
    name = f"{template}#{target}" if target in partials else template
    return render(request, name, context, status=status)


MAX_INT_PARAM = 2**31 - 1


def int_param(value: str | None) -> int | None:
    """A query parameter as an integer, clamped to ±(2**31 - 1) (``?epage=10**20`` must not
    reach the database as an offset it cannot hold); None when absent or not a number."""
    try:
        number = int(value) if value is not None and value != "" else None
    except (TypeError, ValueError):
        return None
    return None if number is None else max(-MAX_INT_PARAM, min(number, MAX_INT_PARAM))


def roles(request: HttpRequest, project: Project) -> dict[str, bool | str | None]:
    """Which controls the page shows: viewers read, members fork, admins manage shares."""
    role = role_in(request.user, project)
    return {"can_fork": role in (Role.MEMBER, Role.ADMIN), "is_admin": role == Role.ADMIN,
            "role": role}


def forkable_run(request: HttpRequest, run_id: str) -> Run:
    """A run the user may fork: readable (else ``not_found``) and their role at least member
    (else ``permission_denied``)."""
    run = queries.get_run(run_id, user=request.user)
    if not roles(request, run.project)["can_fork"]:
        raise PermissionDenied(f"forking needs the member role in project {run.project.slug!r};"
                               " you can read this run but not fork it")
    return run
