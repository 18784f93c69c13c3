"""Anthropic Messages on the wire ⇄ the engine's provider-neutral call model.

The same four verbs as :mod:`forklab.sdk.wire_openai`: ``request`` (a ``POST /v1/messages``
body: ``system`` becomes the system prompt, ``tool_use`` blocks an assistant message's tool
calls, ``tool_result`` blocks ``tool`` messages), ``response`` (a JSON body or a whole event
stream), ``render`` (a served answer as the body or stream the official client parses) and
``apply`` (a changed model, temperature or system prompt put into the body sent live).
"""

from __future__ import annotations

import json
from typing import Any

from forklab.engine.providers import ChatRequest, ChatResponse, ToolCallRequest, ToolDefinition
from forklab.engine.providers.base import Message
from forklab.sdk import sse
from forklab.sdk.wire_common import apply_settings, error_kind

_MAPPED = {"model", "messages", "system", "temperature", "tools", "tool_choice", "stream",
           "max_tokens"}
_STOP = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
         "max_tokens": "length"}
_BACK = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def _text(blocks: Any) -> Any:
    if isinstance(blocks, list) and all(
            isinstance(b, dict) and b.get("type") == "text" for b in blocks):
        return "".join(str(b.get("text", "")) for b in blocks)
    return blocks


def _messages(raw: list[dict[str, Any]]) -> list[Message]:
    names: dict[str, str] = {}
    out: list[Message] = []
    for m in raw:
        content = m.get("content")
        if not isinstance(content, list):
            out.append({"role": m.get("role"), "content": content})
            continue
        uses = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        rest = [b for b in content if b not in uses and b not in results]
        for b in uses:
            names[str(b.get("id", ""))] = str(b.get("name", ""))
        for b in results:
            out.append({"role": "tool", "tool_call_id": str(b.get("tool_use_id", "")),
                        "name": names.get(str(b.get("tool_use_id", "")), ""),
                        "content": _text(b.get("content")),
                        **({"is_error": True} if b.get("is_error") else {})})
        if m.get("role") == "assistant":
            message: Message = {"role": "assistant", "content": _text(
                [{"type": "text", "text": b.get("text", "")} for b in rest
                 if b.get("type") == "text"])}
            if uses:
                message["tool_calls"] = [{"id": b.get("id", ""), "name": b.get("name", ""),
                                          "arguments": b.get("input")} for b in uses]
            out.append(message)
        elif rest or not results:
            out.append({"role": m.get("role"), "content": _text(rest)})
    return out


def request(body: dict[str, Any]) -> ChatRequest:
    """The call model of one Messages body."""
    params = {k: v for k, v in body.items() if k not in _MAPPED}
    tools, other = [], []
    for tool in body.get("tools") or ():
        if "input_schema" in tool:
            tools.append(ToolDefinition(name=tool.get("name", ""),
                                        description=tool.get("description") or "",
                                        parameters=tool.get("input_schema") or {}))
        else:
            other.append(tool)
    if other:
        params["tools"] = other
    choice: Any = body.get("tool_choice")
    parallel = None
    if isinstance(choice, dict):
        if "disable_parallel_tool_use" in choice:
            parallel = not choice["disable_parallel_tool_use"]
        kind = choice.get("type")
        choice = ({"name": choice.get("name", "")} if kind == "tool"
                  else {"any": "required"}.get(str(kind), kind))
    system = body.get("system")
    return ChatRequest(
        provider="anthropic", model=str(body.get("model", "")),
        system_prompt=str(_text(system) or "") if not isinstance(_text(system), list)
        else json.dumps(system),
        temperature=float(body.get("temperature", 1.0)),
        messages=tuple(_messages(list(body.get("messages") or ()))),
        max_tokens=int(body.get("max_tokens") or 0), params=params, tools=tuple(tools),
        tool_choice=choice, parallel_tool_calls=parallel)


def apply(body: dict[str, Any], was: ChatRequest, now: ChatRequest) -> dict[str, Any]:
    """``body`` with what a change made different between ``was`` and ``now``."""
    return apply_settings(body, was, now, _set_system)


def _set_system(body: dict[str, Any], text: str) -> None:
    body["system"] = text


def _finish(stop: Any) -> str | None:
    return _STOP.get(stop, stop) if isinstance(stop, str) else None


def response(raw: bytes, streamed: bool) -> ChatResponse:
    """A reply (a JSON body, or a whole stream when ``streamed``) in the call model."""
    data = _assembled(raw) if streamed else json.loads(raw)
    blocks = data.get("content") or []
    usage = data.get("usage") or {}
    return ChatResponse(
        text="".join(b.get("text", "") for b in blocks if b.get("type") == "text"),
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        tool_calls=tuple(ToolCallRequest(id=b.get("id", ""), name=b.get("name", ""),
                                         arguments=b.get("input"))
                         for b in blocks if b.get("type") == "tool_use"),
        finish_reason=_finish(data.get("stop_reason")))


def _assembled(raw: bytes) -> dict[str, Any]:
    """The message a stream describes, put back together."""
    message: dict[str, Any] = {"content": [], "usage": {}}
    partial: dict[int, str] = {}
    for _, event in sse.events(raw):
        kind = event.get("type")
        if kind == "message_start":
            message.update({k: v for k, v in event.get("message", {}).items()
                            if k != "content"})
        elif kind == "content_block_start":
            message["content"].append(dict(event.get("content_block") or {}))
        elif kind == "content_block_delta":
            block, delta = message["content"][int(event.get("index", 0))], event["delta"]
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                i = int(event.get("index", 0))
                partial[i] = partial.get(i, "") + delta.get("partial_json", "")
        elif kind == "message_delta":
            message.update(event.get("delta") or {})
            message["usage"] = {**message.get("usage", {}), **(event.get("usage") or {})}
    for i, text in partial.items():
        message["content"][i]["input"] = json.loads(text) if text else {}
    return message


def render(body: dict[str, Any], served: Any, ident: str) -> tuple[bytes, str]:
    """The body (or stream) answering ``body`` with ``served``; and its content type."""
    blocks: list[dict[str, Any]] = []
    if served.text or not served.tool_calls:
        blocks.append({"type": "text", "text": served.text})
    blocks += [{"type": "tool_use", "id": c.get("id", ""), "name": c.get("name", ""),
                "input": c.get("arguments") if isinstance(c.get("arguments"), dict) else {}}
               for c in served.tool_calls]
    finish = served.finish_reason or ("tool_calls" if served.tool_calls else "stop")
    message = {"id": f"msg_{ident}", "type": "message", "role": "assistant",
               "model": str(body.get("model", "")), "content": blocks,
               "stop_reason": _BACK.get(finish, finish), "stop_sequence": None,
               "usage": {"input_tokens": served.input_tokens,
                         "output_tokens": served.output_tokens}}
    if not body.get("stream"):
        return json.dumps(message).encode(), "application/json"
    start = {**message, "content": [], "stop_reason": None,
             "usage": {"input_tokens": served.input_tokens, "output_tokens": 0}}
    items: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(blocks):
        empty = ({"type": "text", "text": ""} if block["type"] == "text"
                 else {**block, "input": {}})
        delta = ({"type": "text_delta", "text": block["text"]} if block["type"] == "text"
                 else {"type": "input_json_delta", "partial_json": json.dumps(block["input"])})
        items += [("content_block_start", {"type": "content_block_start", "index": i,
                                           "content_block": empty}),
                  ("content_block_delta", {"type": "content_block_delta", "index": i,
                                           "delta": delta}),
                  ("content_block_stop", {"type": "content_block_stop", "index": i})]
    items += [("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": served.output_tokens}}),
        ("message_stop", {"type": "message_stop"})]
    return sse.encode(items), "text/event-stream"


__all__ = ["apply", "error_body", "render", "request", "response"]


def error_body(status: int, message: str) -> dict[str, Any]:
    """The error body the Messages API answers ``status`` with (what a served recorded
    failure hands the client, which raises from its status: ``anthropic.RateLimitError``)."""
    return {"type": "error", "error": {"type": error_kind(status), "message": message}}
