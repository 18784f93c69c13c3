"""The stub's answers as the vendors stream them (``"stream": true``): the same reply, cut
into server-sent events the way each API sends them — Chat Completions chunks ending in
``[DONE]``, Anthropic's ``message_start`` … ``message_stop``, Responses'
``response.created`` … ``response.completed``."""

from __future__ import annotations

import json
from typing import Any


def _sse(events: list[tuple[str | None, Any]], done: bool = False) -> bytes:
    out = "".join((f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n"
                  for name, data in events)
    return (out + ("data: [DONE]\n\n" if done else "")).encode()


def openai_chat(body: dict[str, Any], include_usage: bool) -> bytes:
    choice = body["choices"][0]
    message = choice["message"]
    head = {k: body[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    text = message.get("content") or ""
    events: list[tuple[str | None, Any]] = [(None, head | {"choices": [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})]
    for i in range(0, len(text), 7):  # several deltas, as a model writes
        events.append((None, head | {"choices": [
            {"index": 0, "delta": {"content": text[i:i + 7]}, "finish_reason": None}]}))
    for i, call in enumerate(message.get("tool_calls") or ()):
        arguments = call["function"]["arguments"]
        events.append((None, head | {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": call["id"], "type": "function",
             "function": {"name": call["function"]["name"], "arguments": ""}}]},
            "finish_reason": None}]}))
        events.append((None, head | {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "function": {"arguments": arguments}}]}, "finish_reason": None}]}))
    events.append((None, head | {"choices": [
        {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}))
    if include_usage:
        events.append((None, head | {"choices": [], "usage": body["usage"]}))
    return _sse(events, done=True)


def anthropic(message: dict[str, Any]) -> bytes:
    start = message | {"content": [], "stop_reason": None,
                       "usage": {"input_tokens": message["usage"]["input_tokens"],
                                 "output_tokens": 1}}
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            first, delta = {"type": "text", "text": ""}, {"type": "text_delta",
                                                           "text": block["text"]}
        else:
            first = block | {"input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [("content_block_start", {"type": "content_block_start", "index": i,
                                            "content_block": first}),
                   ("content_block_delta", {"type": "content_block_delta", "index": i,
                                            "delta": delta}),
                   ("content_block_stop", {"type": "content_block_stop", "index": i})]
    events += [("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": message["stop_reason"],
                                            "stop_sequence": None},
                                  "usage": {"output_tokens": message["usage"]["output_tokens"]}}),
               ("message_stop", {"type": "message_stop"})]
    return _sse(events)


def responses(response: dict[str, Any]) -> bytes:
    events: list[tuple[str | None, Any]] = [("response.created", {
        "type": "response.created", "sequence_number": 0,
        "response": response | {"status": "in_progress", "output": []}})]
    for i, item in enumerate(response["output"]):
        events.append(("response.output_item.done", {
            "type": "response.output_item.done", "sequence_number": len(events),
            "output_index": i, "item": item}))
    events.append(("response.completed", {"type": "response.completed",
                                          "sequence_number": len(events),
                                          "response": response}))
    return _sse(events)
