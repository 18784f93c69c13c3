"""What the three wire forms (Chat Completions, Responses, Messages) share: writing a
fork's per-call setting changes back into the request the team's code built, and naming
an error status as the vendors' error bodies do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from forklab.engine.providers import ChatRequest


def apply_settings(body: dict[str, Any], was: ChatRequest, now: ChatRequest,
                   set_system: Callable[[dict[str, Any], str], None]) -> dict[str, Any]:
    """A copy of ``body`` with what a change made different between ``was`` and ``now``:
    model and temperature where every vendor keeps them, the system prompt where
    ``set_system`` writes it in this vendor's form."""
    body = dict(body)
    if now.model != was.model:
        body["model"] = now.model
    if now.temperature != was.temperature:
        body["temperature"] = now.temperature
    if now.system_prompt != was.system_prompt:
        set_system(body, now.system_prompt)
    return body


_ERROR_KINDS = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 409: "conflict_error",
                422: "invalid_request_error", 429: "rate_limit_error"}


def error_kind(status: int) -> str:
    """The error ``type`` both vendors give an HTTP ``status`` in their error bodies."""
    return _ERROR_KINDS.get(status, "api_error")
