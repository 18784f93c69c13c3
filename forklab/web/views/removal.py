"""Deleting a run from the dashboard (project admins): above all the runs an older version
stored unreadable (their JSON shows ``error.code`` ``unreadable``)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from forklab.engine.errors import RunInProgress
from forklab.runs import services
from forklab.web.views.common import page_errors


@login_required
@require_POST
@page_errors
def delete_run(request: HttpRequest, run_id: str) -> HttpResponse:
    try:
        services.delete_run(user=request.user, run_id=run_id)
    except RunInProgress as exc:
        return HttpResponse(f"{exc.message}\n", status=409, content_type="text/plain")
    return redirect(reverse("home"))
