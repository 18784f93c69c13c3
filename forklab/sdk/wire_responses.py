"""OpenAI Responses (``POST /responses``) on the wire ⇄ the engine's call model.

The same four verbs as :mod:`forklab.sdk.wire_openai`. ``input`` items become messages
(``function_call`` items an assistant message's tool calls, ``function_call_output`` items
``tool`` messages, keyed by ``call_id``); ``instructions`` is the system prompt. Item ids
(``fc_…``, ``msg_…``) are left out of the call model: the vendor mints them anew on every
call, so a conversation fed back from a recorded reply asks the same request as the live
one. ``previous_response_id`` (state kept on the vendor's side) is recorded as a parameter,
but what it refers to is not visible to forklab.
"""

from __future__ import annotations

import json
from typing import Any

from forklab.engine.providers import ChatRequest, ChatResponse, ToolCallRequest, ToolDefinition
from forklab.engine.providers.base import Message
from forklab.sdk import sse
from forklab.sdk.wire_common import apply_settings
from forklab.sdk.wire_openai import UNSET_MAX_TOKENS, decode_arguments, error_body

_MAPPED = {"model", "input", "instructions", "temperature", "tools", "tool_choice",
           "parallel_tool_calls", "stream", "max_output_tokens", "text"}


def _content(content: Any) -> Any:
    if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text")
            for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    return content


def _messages(items: Any) -> list[Message]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[Message] = []
    names: dict[str, str] = {}
    for item in items or ():
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {"id": item.get("call_id", ""), "name": item.get("name", ""),
                    "arguments": decode_arguments(item.get("arguments"))}
            names[call["id"]] = call["name"]
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item.get("call_id", ""),
                        "name": names.get(item.get("call_id", ""), ""),
                        "content": _content(item.get("output"))})
        elif kind == "message":
            out.append({"role": item.get("role", "user"),
                        "content": _content(item.get("content"))})
        else:  # reasoning and other items: kept as they are (their ids aside)
            out.append({"role": "item", "content": {k: v for k, v in item.items()
                                                    if k != "id"}})
    return out


def request(body: dict[str, Any]) -> ChatRequest:
    """The call model of one Responses body."""
    params = {k: v for k, v in body.items() if k not in _MAPPED}
    tools, other = [], []
    for tool in body.get("tools") or ():
        if tool.get("type") == "function":
            tools.append(ToolDefinition(name=tool.get("name", ""),
                                        description=tool.get("description") or "",
                                        parameters=tool.get("parameters") or {}))
        else:
            other.append(tool)
    if other:
        params["tools"] = other
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        choice = {"name": choice.get("name", "")}
    fmt = ((body.get("text") or {}).get("format")) or {}
    schema = fmt.get("schema") if fmt.get("type") == "json_schema" else None
    if body.get("text") and schema is None:
        params["text"] = body["text"]
    return ChatRequest(
        provider="openai", model=str(body.get("model", "")),
        system_prompt=str(body.get("instructions") or ""),
        temperature=float(body.get("temperature", 1.0)),
        messages=tuple(_messages(body.get("input"))),
        max_tokens=int(body.get("max_output_tokens") or UNSET_MAX_TOKENS),
        params={**params, "api": "responses"}, tools=tuple(tools), tool_choice=choice,
        parallel_tool_calls=body.get("parallel_tool_calls"), response_format=schema)


def apply(body: dict[str, Any], was: ChatRequest, now: ChatRequest) -> dict[str, Any]:
    """``body`` with what a change made different between ``was`` and ``now``."""
    return apply_settings(body, was, now, _set_system)


def _set_system(body: dict[str, Any], text: str) -> None:
    body["instructions"] = text


def response(raw: bytes, streamed: bool) -> ChatResponse:
    """A reply (a JSON body, or a whole stream when ``streamed``) in the call model."""
    data = json.loads(raw) if not streamed else next(
        (e["response"] for _, e in sse.events(raw) if e.get("type") == "response.completed"),
        {})
    text, calls = [], []
    for item in data.get("output") or ():
        if item.get("type") == "message":
            text += [p.get("text", "") for p in item.get("content") or ()
                     if p.get("type") == "output_text"]
        elif item.get("type") == "function_call":
            calls.append(ToolCallRequest(id=item.get("call_id", ""), name=item.get("name", ""),
                                         arguments=decode_arguments(item.get("arguments"))))
    usage = data.get("usage") or {}
    status = data.get("status")
    finish = "tool_calls" if calls else ("length" if status == "incomplete" else "stop")
    return ChatResponse(text="".join(text), input_tokens=int(usage.get("input_tokens") or 0),
                        output_tokens=int(usage.get("output_tokens") or 0),
                        tool_calls=tuple(calls), finish_reason=finish)


def render(body: dict[str, Any], served: Any, ident: str) -> tuple[bytes, str]:
    """The body (or stream) answering ``body`` with ``served``; and its content type."""
    output: list[dict[str, Any]] = []
    if served.text or not served.tool_calls:
        output.append({"type": "message", "id": f"msg_{ident}", "role": "assistant",
                       "status": "completed", "content": [
                           {"type": "output_text", "text": served.text, "annotations": []}]})
    for i, c in enumerate(served.tool_calls):
        arguments = c.get("arguments")
        output.append({"type": "function_call", "id": f"fc_{ident}_{i}",
                       "call_id": c.get("id", ""), "name": c.get("name", ""),
                       "status": "completed", "arguments": arguments
                       if isinstance(arguments, str) else json.dumps(arguments)})
    data = {"id": f"resp_{ident}", "object": "response", "created_at": 0,
            "status": "incomplete" if served.finish_reason == "length" else "completed",
            "model": str(body.get("model", "")), "output": output,
            "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools", []),
            "usage": {"input_tokens": served.input_tokens,
                      "output_tokens": served.output_tokens,
                      "total_tokens": served.input_tokens + served.output_tokens,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}
    if not body.get("stream"):
        return json.dumps(data).encode(), "application/json"
    items: list[tuple[str | None, Any]] = [("response.created", {
        "type": "response.created", "sequence_number": 0,
        "response": {**data, "status": "in_progress", "output": []}})]
    for i, item in enumerate(output):
        n = len(items)
        items += [("response.output_item.added", {"type": "response.output_item.added",
                                                  "sequence_number": n, "output_index": i,
                                                  "item": item}),
                  ("response.output_item.done", {"type": "response.output_item.done",
                                                 "sequence_number": n + 1, "output_index": i,
                                                 "item": item})]
    items.append(("response.completed", {"type": "response.completed",
                                         "sequence_number": len(items), "response": data}))
    return sse.encode(items), "text/event-stream"


__all__ = ["apply", "error_body", "render", "request", "response"]
