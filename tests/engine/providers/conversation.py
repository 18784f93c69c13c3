"""One support conversation, in forklab's neutral form, reused by the provider tests."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from forklab.engine.providers import ChatRequest, ChatResponse, ToolDefinition

LOOKUP = ToolDefinition(
    name="lookup_order", description="Look up an order by its id.",
    parameters={"type": "object", "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"]})
REFUND = ToolDefinition(
    name="refund", description="Refund an order.",
    parameters={"type": "object",
                "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                "required": ["order_id", "amount"]})
ORDER_SCHEMA: dict[str, Any] = {
    "type": "object", "title": "order_status",
    "properties": {"order_id": {"type": "string"},
                   "status": {"type": "string", "enum": ["shipped", "pending"]}},
    "required": ["order_id", "status"], "additionalProperties": False}
SYSTEM = "You are the support agent for Acme."
USER = "Where is order A-17?"
RESULT = '{"order_id": "A-17", "status": "shipped", "total": 42.5}'


def request(provider: str, **changes: Any) -> ChatRequest:
    fields: dict[str, Any] = {
        "provider": provider, "model": "gpt-4o-mini" if provider == "openai"
        else "claude-sonnet-4-5", "system_prompt": SYSTEM, "temperature": 0.2,
        "max_tokens": 200, "messages": ({"role": "user", "content": USER},),
        "tools": (LOOKUP,)}
    return ChatRequest(**{**fields, **changes})


def answered(request: ChatRequest, response: ChatResponse, result: str = RESULT,
             ) -> ChatRequest:
    """The next turn's request: the reply, then a tool message answering each call."""
    results = tuple({"role": "tool", "tool_call_id": call.id, "name": call.name,
                     "content": result} for call in response.tool_calls)
    return dataclasses.replace(
        request, messages=(*request.messages, response.to_message(), *results))


# The same conversation after one lookup, as forklab stores it and as a vendor's own client
# would be given it: the provider tests compare what reaches the server from each.
CALL_ID = "call_1"
TURN_2 = (
    {"role": "user", "content": USER},
    {"role": "assistant", "content": "Let me check.",
     "tool_calls": [{"id": CALL_ID, "name": "lookup_order", "arguments": {"order_id": "A-17"}}]},
    {"role": "tool", "tool_call_id": CALL_ID, "name": "lookup_order", "content": RESULT},
    {"role": "user", "content": "And refund it."},
)
ARGS_TEXT = json.dumps({"order_id": "A-17"})
