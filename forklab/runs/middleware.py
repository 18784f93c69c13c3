"""The HTTP edge's first check: a URL or form field no store can keep is a 400, not a 500.

A path whose percent-escapes do not decode to UTF-8 (``/api/v1/runs/%ff/``) is refused the
same way (``invalid_input``), before Django resolves it.

Path segments (run ids), query parameters and form fields reach database filters and inserts
as they are; a NUL character in any of them makes PostgreSQL raise, and a lone surrogate
cannot be encoded; and a form's JSON editor field nested thousands deep would make the
form's parser recurse past Python's limit. This refuses such a request before any view
runs: ``invalid_input`` as the API's JSON error body under ``/api/``, a plain-text 400
elsewhere. (JSON bodies are checked by the API's parser,
``forklab.api.inputs.BoundedJSONParser``; JSON values a form carries, once parsed, by
``specs.parse``.)
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote_to_bytes

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.handlers.wsgi import get_bytes_from_wsgi
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.utils.decorators import sync_and_async_middleware

from forklab.engine.errors import InvalidInput
from forklab.engine.inputs import check_json_text, check_json_value, loads, too_large

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


@sync_and_async_middleware
def refuse_unstorable_input(get_response: Callable[[HttpRequest], Any]) -> Callable[..., Any]:
    """The checks are plain CPU work on a request whose body is already read, so they run
    inline in both modes (no thread hop under ASGI)."""
    if iscoroutinefunction(get_response):
        async def async_middleware(request: HttpRequest) -> HttpResponse:
            return refusal(request) or await get_response(request)

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponse:
        return refusal(request) or get_response(request)

    return middleware


def refusal(request: HttpRequest) -> HttpResponse | None:
    """The 400 for a request holding what no store can keep; None for any other."""
    try:
        check_request(request)
    except InvalidInput as exc:
        if request.path.startswith("/api/"):
            return JsonResponse({"code": exc.code, "detail": exc.message,
                                 "path": exc.context.get("path")}, status=400)
        return HttpResponse(f"400 Bad Request: {exc.message}\n", status=400,
                            content_type="text/plain; charset=utf-8")
    return None


def check_request(request: HttpRequest) -> None:
    """Raise ``InvalidInput`` for a path, query parameter or form field holding NUL or an
    unencodable character."""
    _check_path_encoding(request)
    check_json_value(request.path, where="the URL path")
    _check_fields(request.GET, "query parameter")
    if request.method == "POST" and request.content_type in FORM_TYPES:
        try:
            form = request.POST
        except RequestDataTooBig:  # DATA_UPLOAD_MAX_MEMORY_SIZE is FORKLAB_MAX_BODY_BYTES
            raise too_large("body", settings.FORKLAB_MAX_BODY_BYTES) from None
        _check_fields(form, "form field", json_editors=True)


def _check_path_encoding(request: HttpRequest) -> None:
    """The path's bytes, percent-escapes decoded, are UTF-8. Django keeps a broken escape
    (``/runs/%ff/``) as the literal text ``%FF`` and would look that up as an id; the
    request is malformed, so it is refused here instead."""
    scope = getattr(request, "scope", None)  # ASGI (daphne): the path as the client sent it
    if scope is not None and scope.get("raw_path"):
        raw = unquote_to_bytes(bytes(scope["raw_path"]).split(b"?", 1)[0])
    else:  # WSGI: Django re-escapes PATH_INFO in place; the server's raw URI is the truth
        uri = request.META.get("RAW_URI") or request.META.get("REQUEST_URI") or ""
        raw = unquote_to_bytes(get_bytes_from_wsgi({"U": uri}, "U", "").split(b"?", 1)[0])
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"the URL path: byte 0x{raw[exc.start]:02x} at offset {exc.start} is not UTF-8 once "
            "its percent-escapes are decoded; percent-encode the path's text as UTF-8",
            path="the URL path") from None


def _check_fields(data: QueryDict, what: str, *, json_editors: bool = False) -> None:
    for name, values in data.lists():
        check_json_value(name, where=f"a {what} name")
        where = f"{what} {name[:40]!r}"
        for value in values:
            check_json_value(value, where=where)
            if json_editors and value.lstrip()[:1] in ("[", "{"):
                _check_json_editor(value, where)


def _check_json_editor(text: str, where: str) -> None:
    """A form's JSON editor text: too deep to parse safely, or holding NaN, NUL or a lone
    surrogate once parsed (``\\ud800`` escapes), is refused here; malformed JSON is left
    for the form to report next to its field."""
    check_json_text(text, where=where)
    with contextlib.suppress(json.JSONDecodeError):
        loads(text, where=where)
