from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from forklab.runs import queries

HOME_LIMIT = 200


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The runs of the projects the user belongs to, newest first (a minimal landing page)."""
    runs = queries.runs_for_user(request.user)
    return render(request, "home.html", {
        "runs": runs[:HOME_LIMIT],
        "total": runs.count(),
        "projects": queries.visible_projects(request.user),
    })


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness plus a database round trip; 503 when the database does not answer."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return JsonResponse({"status": "error", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok", "database": connection.vendor})
