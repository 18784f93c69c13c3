"""The HTTP edge's first check: a URL or form field no store can keep is a 400, not a 500.

Path segments (run ids), query parameters and form fields reach database filters and inserts
as they are; a NUL character in any of them makes PostgreSQL raise, and a lone surrogate
cannot be encoded. This refuses such a request before any view runs: ``invalid_input`` as
the API's JSON error body under ``/api/``, a plain-text 400 elsewhere. (JSON bodies are
checked by the API's parser, ``forklab.api.inputs.BoundedJSONParser``.)
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from forklab.engine.errors import InvalidInput
from forklab.engine.inputs import check_json_value

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def refuse_unstorable_input(get_response: Callable[[HttpRequest], HttpResponse],
                            ) -> Callable[[HttpRequest], HttpResponse]:
    def middleware(request: HttpRequest) -> HttpResponse:
        try:
            check_request(request)
        except InvalidInput as exc:
            if request.path.startswith("/api/"):
                return JsonResponse({"code": exc.code, "detail": exc.message,
                                     "path": exc.context.get("path")}, status=400)
            return HttpResponse(f"400 Bad Request: {exc.message}\n", status=400,
                                content_type="text/plain; charset=utf-8")
        return get_response(request)

    return middleware


def check_request(request: HttpRequest) -> None:
    """Raise ``InvalidInput`` for a path, query parameter or form field holding NUL or an
    unencodable character."""
    check_json_value(request.path, where="the URL path")
    for name, values in request.GET.lists():
        check_json_value([name, *values], where=f"query parameter {name[:40]!r}")
    if request.method == "POST" and request.content_type in FORM_TYPES:
        for name, values in request.POST.lists():
            check_json_value([name, *values], where=f"form field {name[:40]!r}")
