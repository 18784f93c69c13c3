"""The API's one exception handler: every error is ``{"code", "detail", ...context}``.

``ForklabError`` (engine, runs) carries a stable ``code``;
:func:`forklab.runs.error_status.status_for` maps it to an HTTP status, the same map the
dashboard's error pages use (the statuses and why are documented there). DRF's own
exceptions (authentication, parse errors, unknown methods, pagination) and Django's (404,
permission, suspicious requests) come out in the same shape.

Anything else escaping a view is a bug: it is logged and answered ``500 internal_error`` in
the same shape (the fuzz test asserts it never happens).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import set_rollback

from forklab.engine.errors import ForklabError
from forklab.engine.inputs import too_large
from forklab.runs.error_status import status_for

log = logging.getLogger("forklab.api")


def error_body(code: str, detail: str, context: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"code", "detail", ...context}``; context never overrides the two fixed keys."""
    return {**(context or {}), "code": code, "detail": detail}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's ``EXCEPTION_HANDLER``: one body shape and one status map for every error."""
    if isinstance(exc, RequestDataTooBig):  # Django's check of the same limit, read first
        exc = too_large("body", settings.FORKLAB_MAX_BODY_BYTES, _content_length(context))
    if isinstance(exc, ForklabError):
        set_rollback()
        return Response(error_body(exc.code, exc.message, _jsonable(exc.context)),
                        status=status_for(exc.code))
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "not found")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif isinstance(exc, SuspiciousOperation):
        exc = exceptions.ParseError(str(exc))
    if isinstance(exc, exceptions.APIException):
        set_rollback()
        return _api_exception(exc)
    log.exception("unhandled error in %s", _view_name(context))
    return Response(error_body("internal_error", "an unexpected error occurred; it has been "
                               "logged"), status=500)


def _api_exception(exc: exceptions.APIException) -> Response:
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header  # type: ignore[attr-defined]
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait))  # type: ignore[attr-defined]
    if isinstance(exc, exceptions.ValidationError):
        errors = _flatten(exc.detail)
        first = errors[0] if errors else {"field": "(request)", "msg": "invalid"}
        body = error_body("invalid_request", f"field '{first['field']}': {first['msg']}",
                          {"field": first["field"], "errors": errors[:10]})
        return Response(body, status=400, headers=headers)
    code = exc.get_codes()
    code = code if isinstance(code, str) else exc.default_code
    if exc.status_code == 404:
        code = "not_found"
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.default_detail)
    return Response(error_body(str(code), str(detail)), status=exc.status_code, headers=headers)


def _flatten(detail: Any, prefix: str = "") -> list[dict[str, str]]:
    """DRF's nested ValidationError detail as ``[{field, msg}]`` (like ``specs.parse``)."""
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            name = "(request)" if key == "non_field_errors" else str(key)
            out += _flatten(value, f"{prefix}.{name}" if prefix else name)
        return out
    if isinstance(detail, list):
        if all(not isinstance(d, (dict, list)) for d in detail):
            return [{"field": prefix or "(request)", "msg": str(d)} for d in detail]
        out = []
        for i, item in enumerate(detail):
            out += _flatten(item, f"{prefix}.{i}" if prefix else str(i))
        return out
    return [{"field": prefix or "(request)", "msg": str(detail)}]


def _jsonable(value: Any) -> Any:
    """Error context as plain JSON (it may hold tuples, sets or other objects)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _content_length(context: dict[str, Any]) -> int | None:
    request = context.get("request")
    length = getattr(request, "META", {}).get("CONTENT_LENGTH", "")
    return int(length) if str(length).isdigit() else None


def _view_name(context: dict[str, Any]) -> str:
    view = context.get("view")
    return type(view).__name__ if view is not None else "a view"
