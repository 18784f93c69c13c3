"""A support agent written the way teams write them: a loop over the official client.

It looks an order up (a read) and may refund it (a write). Each variant talks to its vendor
through the unchanged official client (``openai.OpenAI()`` reads ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY``; ``anthropic.Anthropic()`` its own variables) — nothing here knows forklab
records it, except the decorators.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai

import forklab
from forklab.engine.scenarios import tools as world

SYSTEM = "You are the support agent of an online shop. Use the tools; be brief."
PARAMETERS = {
    "lookup_order": {"type": "object", "properties": {"order_id": {"type": "string"}},
                     "required": ["order_id"]},
    "issue_refund": {"type": "object", "properties": {"order_id": {"type": "string"},
                                                      "amount": {"type": "number"}},
                     "required": ["order_id", "amount"]},
}
DESCRIPTIONS = {"lookup_order": "Look up an order by its id.",
                "issue_refund": "Refund an order (money leaves the company)."}
MAX_TURNS = 6


@forklab.tool(effect="read")
def lookup_order(order_id: str) -> dict[str, Any]:
    return world.lookup_order(order_id)


@forklab.tool(effect="write")
def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
    return world.issue_refund(order_id, amount)


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {"lookup_order": lookup_order,
                                                  "issue_refund": issue_refund}


def _run_tool(name: str, arguments: Any) -> str:
    if name not in TOOLS:
        return f"error: unknown tool {name!r}"
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    return json.dumps(TOOLS[name](**args))


OPENAI_TOOLS: list[Any] = [
    {"type": "function", "function": {"name": n, "description": DESCRIPTIONS[n],
                                      "parameters": p}} for n, p in PARAMETERS.items()]


@forklab.workflow("support")
def support(ticket: str, model: str = "gpt-4.1-mini") -> str:
    """The support agent over OpenAI Chat Completions (sync)."""
    client = openai.OpenAI()
    messages: list[Any] = [{"role": "system", "content": SYSTEM},
                           {"role": "user", "content": ticket}]
    for _ in range(MAX_TURNS):
        reply = client.chat.completions.create(model=model, messages=messages,
                                               tools=OPENAI_TOOLS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            if call.type == "function":
                content = _run_tool(call.function.name, call.function.arguments)
            else:
                content = f"error: unsupported tool call {call.type!r}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return "gave up"


@forklab.workflow("support_stream")
async def support_stream(ticket: str, model: str = "gpt-4.1-mini") -> str:
    """The support agent over the async OpenAI client, streaming every reply."""
    client = openai.AsyncOpenAI()
    messages: list[Any] = [{"role": "system", "content": SYSTEM},
                           {"role": "user", "content": ticket}]
    with forklab.step("triage"):
        for _ in range(MAX_TURNS):
            stream = await client.chat.completions.create(
                model=model, messages=messages, tools=OPENAI_TOOLS, stream=True)
            text, calls = "", dict[int, dict[str, str]]()
            async for chunk in stream:
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for part in choice.delta.tool_calls or ():
                        call = calls.setdefault(part.index, {"id": "", "name": "", "args": ""})
                        call["id"] = part.id or call["id"]
                        call["name"] += (part.function.name or "") if part.function else ""
                        call["args"] += (part.function.arguments or "") if part.function else ""
            if not calls:
                return text
            messages.append({"role": "assistant", "content": text, "tool_calls": [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["args"]}}
                for _, c in sorted(calls.items())]})
            for _, c in sorted(calls.items()):
                messages.append({"role": "tool", "tool_call_id": c["id"],
                                 "content": _run_tool(c["name"], c["args"])})
    return "gave up"


ANTHROPIC_TOOLS: list[Any] = [{"name": n, "description": DESCRIPTIONS[n], "input_schema": p}
                              for n, p in PARAMETERS.items()]


@forklab.workflow("support_claude")
def support_claude(ticket: str, model: str = "claude-sonnet-4-5", stream: bool = False) -> str:
    """The support agent over the Anthropic Messages API (sync; streamed when asked)."""
    client = anthropic.Anthropic()
    messages: list[Any] = [{"role": "user", "content": ticket}]
    for _ in range(MAX_TURNS):
        if stream:
            with client.messages.stream(model=model, max_tokens=512, system=SYSTEM,
                                        messages=messages, tools=ANTHROPIC_TOOLS) as events:
                reply: Any = events.get_final_message()
        else:
            reply = client.messages.create(model=model, max_tokens=512, system=SYSTEM,
                                           messages=messages, tools=ANTHROPIC_TOOLS)
        messages.append({"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return "".join(b.text for b in reply.content if b.type == "text")
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": _run_tool(b.name, b.input)}
            for b in uses]})
    return "gave up"
