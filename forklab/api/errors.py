"""The API's one exception handler: every error is ``{"code", "detail", ...context}``.

``ForklabError`` (engine, runs) carries a stable ``code``; :data:`STATUS` maps it to an HTTP
status. DRF's own exceptions (authentication, parse errors, unknown methods, pagination) and
Django's (404, permission, suspicious requests) come out in the same shape.

Statuses, chosen once for every endpoint:

- **400** the request is malformed: its body or query does not match the endpoint's schema
  (``invalid_request``, ``parse_error``), holds what no store can keep — an unencodable
  string, NUL, NaN or Infinity, nesting or size over the limits (``invalid_input``) — or the
  graph document it carries is invalid (``invalid_graph``, ``unknown_node``,
  ``unbounded_cycle``);
- **422** the request is well formed but the run it names cannot take it: the fork point,
  the changes, the budget or the side-effect policy do not fit that run, or replaying it fails;
  a ``client_request_id`` reused with a different body (``idempotency_conflict``);
- **401** not authenticated, **403** the role is too low, **404** unknown — or outside the
  user's projects (never 403 there), **409** a conflict with the current state (an
  unfinished run, a paused-only action, a gate already answered, a taken name, a promote
  race).

Anything else escaping a view is a bug: it is logged and answered ``500 internal_error`` in
the same shape (the fuzz test asserts it never happens).
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import SuspiciousOperation
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import set_rollback

from forklab.engine.errors import ForklabError

log = logging.getLogger("forklab.api")

BAD_REQUEST = ("invalid_request", "invalid_argument", "parse_error", "invalid_graph",
               "unknown_node", "unbounded_cycle", "invalid_input")
UNPROCESSABLE = ("fork_point_not_found", "fork_point_mid_node", "invalid_change",
                 "invalid_overrides", "conflicting_changes", "unpriced_model",
                 "live_budget_exceeded", "write_not_allowed", "prefix_diverged", "version_skew",
                 "source_missing", "replay_divergence", "unknown_provider", "unknown_tool",
                 "idempotency_conflict", "store_rejected")
CONFLICT = ("run_in_progress", "promote_conflict", "invalid_run_state", "case_exists",
            "seq_conflict", "event_gap", "already_answered", "lease_lost")

STATUS: dict[str, int] = {
    **dict.fromkeys(BAD_REQUEST, 400),
    **dict.fromkeys(UNPROCESSABLE, 422),
    **dict.fromkeys(CONFLICT, 409),
    "not_authenticated": 401, "authentication_failed": 401,
    "permission_denied": 403,
    "not_found": 404, "unknown_scenario": 404,
    "method_not_allowed": 405, "not_acceptable": 406, "unsupported_media_type": 415,
    "throttled": 429,
    "provider_error": 502, "database_not_ready": 503,
    # a malformed engine setting (FORKLAB_MAX_CONCURRENCY): the server's fault, not the
    # caller's; settings refuse it at start-up, so a request can only meet it mid-reconfigure
    "invalid_configuration": 503,
}
DEFAULT_STATUS = 400  # a ForklabError whose code is not listed is still the caller's error


def status_for(code: str) -> int:
    return STATUS.get(code, DEFAULT_STATUS)


def error_body(code: str, detail: str, context: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"code", "detail", ...context}``; context never overrides the two fixed keys."""
    return {**(context or {}), "code": code, "detail": detail}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's ``EXCEPTION_HANDLER``: one body shape and one status map for every error."""
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


def _view_name(context: dict[str, Any]) -> str:
    view = context.get("view")
    return type(view).__name__ if view is not None else "a view"
