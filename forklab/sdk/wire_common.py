"""What the three wire forms (Chat Completions, Responses, Messages) share: writing a
fork's per-call setting changes back into the request the team's code built."""

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
