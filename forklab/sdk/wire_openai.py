"""OpenAI Chat Completions on the wire ⇄ the engine's provider-neutral call model.

``request`` reads a ``POST /chat/completions`` body into a :class:`ChatRequest` (system and
developer messages become the system prompt; tool calls' arguments are decoded; fields the
call model has no place for go to ``params``, so they are hashed and recorded too);
``response`` reads a reply — a JSON body or a whole event stream — into a
:class:`ChatResponse`; ``render`` writes a served answer back as the body (or the stream)
the official client parses; ``apply`` puts a changed model, temperature or system prompt
into the body sent live.
"""

from __future__ import annotations

import json
from typing import Any

from forklab.engine.providers import ChatRequest, ChatResponse, ToolCallRequest, ToolDefinition
from forklab.engine.providers.base import Message
from forklab.sdk import sse
from forklab.sdk.wire_common import apply_settings, error_kind

UNSET_MAX_TOKENS = 4096
"""The output bound a call that sets none is costed with (its worst case in a fork budget)."""
_MAPPED = {"model", "messages", "temperature", "tools", "tool_choice", "parallel_tool_calls",
           "response_format", "stream", "stream_options", "max_tokens",
           "max_completion_tokens"}
_SYSTEM = ("system", "developer")


def decode_arguments(text: Any) -> Any:
    """A tool call's arguments: the decoded JSON when it parses, else the raw text."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _text(content: Any) -> Any:
    """Plain text for a content that is only text parts; other content as it is."""
    if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    return content


def _message(m: dict[str, Any], names: dict[str, str]) -> Message:
    role = m.get("role")
    if role == "assistant":
        out: Message = {"role": "assistant", "content": _text(m.get("content")) or ""}
        calls = [{"id": c.get("id", ""), "name": c.get("function", {}).get("name", ""),
                  "arguments": decode_arguments(c.get("function", {}).get("arguments"))}
                 for c in m.get("tool_calls") or ()]
        for call in calls:
            names[call["id"]] = call["name"]
        if calls:
            out["tool_calls"] = calls
        return out
    if role == "tool":
        call_id = str(m.get("tool_call_id", ""))
        return {"role": "tool", "tool_call_id": call_id, "name": names.get(call_id, ""),
                "content": _text(m.get("content"))}
    return {k: (_text(v) if k == "content" else v) for k, v in m.items()}


def request(body: dict[str, Any]) -> ChatRequest:
    """The call model of one Chat Completions body."""
    raw = list(body.get("messages") or ())
    system = [m for m in raw if isinstance(m, dict) and m.get("role") in _SYSTEM]
    names: dict[str, str] = {}
    messages = tuple(_message(m, names) for m in raw
                     if isinstance(m, dict) and m.get("role") not in _SYSTEM)
    params = {k: v for k, v in body.items() if k not in _MAPPED}
    tools, other = [], []
    for tool in body.get("tools") or ():
        fn = tool.get("function") if tool.get("type") == "function" else None
        if fn is None:
            other.append(tool)
        else:
            tools.append(ToolDefinition(name=fn.get("name", ""),
                                        description=fn.get("description") or "",
                                        parameters=fn.get("parameters") or {}))
    if other:
        params["tools"] = other
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        choice = {"name": (choice.get("function") or {}).get("name", "")}
    fmt = body.get("response_format")
    schema = None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
    elif fmt is not None:
        params["response_format"] = fmt
    return ChatRequest(
        provider="openai", model=str(body.get("model", "")),
        system_prompt="\n\n".join(str(_text(m.get("content")) or "") for m in system),
        temperature=float(body.get("temperature", 1.0)), messages=messages,
        max_tokens=int(body.get("max_completion_tokens") or body.get("max_tokens")
                       or UNSET_MAX_TOKENS),
        params=params, tools=tuple(tools), tool_choice=choice,
        parallel_tool_calls=body.get("parallel_tool_calls"), response_format=schema)


def apply(body: dict[str, Any], was: ChatRequest, now: ChatRequest) -> dict[str, Any]:
    """``body`` with what a change made different between ``was`` and ``now``."""
    return apply_settings(body, was, now, _set_system)


def _set_system(body: dict[str, Any], text: str) -> None:
    rest = [m for m in body.get("messages") or () if m.get("role") not in _SYSTEM]
    body["messages"] = [{"role": "system", "content": text}, *rest]


def response(raw: bytes, streamed: bool) -> ChatResponse:
    """A reply (a JSON body, or a whole stream when ``streamed``) in the call model."""
    if streamed:
        return _assembled(raw)
    data = json.loads(raw)
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    usage = data.get("usage") or {}
    return ChatResponse(
        text=message.get("content") or "",
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        tool_calls=tuple(ToolCallRequest(
            id=c.get("id", ""), name=(c.get("function") or {}).get("name", ""),
            arguments=decode_arguments((c.get("function") or {}).get("arguments")))
            for c in message.get("tool_calls") or ()),
        finish_reason=choice.get("finish_reason"))


def _assembled(raw: bytes) -> ChatResponse:
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: dict[str, Any] = {}
    for _, chunk in sse.events(raw):
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            text.append(delta.get("content") or "")
            for part in delta.get("tool_calls") or ():
                call = calls.setdefault(int(part.get("index", 0)),
                                        {"id": "", "name": "", "arguments": ""})
                fn = part.get("function") or {}
                call["id"] = part.get("id") or call["id"]
                call["name"] += fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return ChatResponse(
        text="".join(text), input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        tool_calls=tuple(ToolCallRequest(id=c["id"], name=c["name"],
                                         arguments=decode_arguments(c["arguments"]))
                         for _, c in sorted(calls.items())),
        finish_reason=finish)


def _calls_wire(tool_calls: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [{"id": c.get("id", ""), "type": "function",
             "function": {"name": c.get("name", ""), "arguments": (
                 c["arguments"] if isinstance(c.get("arguments"), str)
                 else json.dumps(c.get("arguments"), separators=(",", ":")))}}
            for c in tool_calls]


def render(body: dict[str, Any], served: Any, ident: str) -> tuple[bytes, str]:
    """The body (or stream) answering ``body`` with ``served``; and its content type."""
    model = str(body.get("model", ""))
    finish = served.finish_reason or ("tool_calls" if served.tool_calls else "stop")
    usage = {"prompt_tokens": served.input_tokens, "completion_tokens": served.output_tokens,
             "total_tokens": served.input_tokens + served.output_tokens}
    calls = _calls_wire(served.tool_calls)
    head = {"id": f"chatcmpl-{ident}", "created": 0, "model": model}
    if not body.get("stream"):
        message: dict[str, Any] = {"role": "assistant", "content": served.text or None}
        if calls:
            message["tool_calls"] = calls
        return json.dumps({**head, "object": "chat.completion", "choices": [
            {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": usage}).encode(), "application/json"
    chunk = {**head, "object": "chat.completion.chunk"}
    delta: dict[str, Any] = {"role": "assistant", "content": served.text or ""}
    items: list[tuple[str | None, Any]] = [(None, {**chunk, "choices": [
        {"index": 0, "delta": delta, "finish_reason": None}]})]
    for i, call in enumerate(calls):
        items.append((None, {**chunk, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, **call}]}, "finish_reason": None}]}))
    items.append((None, {**chunk, "choices": [{"index": 0, "delta": {},
                                               "finish_reason": finish}]}))
    if (body.get("stream_options") or {}).get("include_usage"):
        items.append((None, {**chunk, "choices": [], "usage": usage}))
    return sse.encode(items, done=True), "text/event-stream"


__all__ = ["apply", "decode_arguments", "error_body", "render", "request", "response"]


def error_body(status: int, message: str) -> dict[str, Any]:
    """The error body the API answers ``status`` with (what a served recorded failure
    hands the client, which raises from its status: ``openai.RateLimitError`` for 429)."""
    return {"error": {"message": message, "type": error_kind(status), "param": None,
                      "code": None}}
