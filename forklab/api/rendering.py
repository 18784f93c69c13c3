"""Bodies of the read model's views (``forklab.runs.readmodel``), rendered once per process.

A finished run's view is immutable and kept; so is what the API renders of it: its JSON
bytes (the only renderer is ``JSONRenderer``). A warm ``GET /forks/{id}/`` of a finished
10,000-event fork then costs the row read and its access check, not serialising megabytes
again. A view of a run still going is rendered each time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpResponse
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from forklab.runs.readmodel import RunView


def view_response(view: RunView, name: str, body: Callable[[], Any]) -> HttpResponse:
    """``body()`` (a serializer's output for ``view``) as a JSON response; for a finished
    run rendered to JSON once and kept with its view under ``name``."""
    if not view.cached:
        return Response(body())
    content = view.rendered(name, lambda: JSONRenderer().render(body()))
    return HttpResponse(content, content_type="application/json")
