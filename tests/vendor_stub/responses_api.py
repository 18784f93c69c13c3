"""The OpenAI Responses API (``POST /v1/responses``) as the stub speaks it: the request is
read as the Chat Completions conversation it amounts to (``instructions`` the system
message, ``function_call`` / ``function_call_output`` items the tool calls and results),
so the one model in ``model.py`` answers it; the reply is a Response's ``output`` items."""

from __future__ import annotations

import json
from typing import Any

from tests.vendor_stub import openai_api
from tests.vendor_stub.model import Conversation, Reply

error_body = openai_api.error_body


def _chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    raw = body.get("input")
    if isinstance(raw, str):
        return [*messages, {"role": "user", "content": raw}]
    for item in raw or ():
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if messages and messages[-1]["role"] == "assistant":
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": item["output"]})
        elif kind == "message":
            content = item.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content)
            messages.append({"role": item.get("role", "user"), "content": content})
    return messages


def read(body: Any, headers: dict[str, str]) -> Conversation:
    if not isinstance(body, dict):
        raise openai_api.Invalid("the body must be a JSON object")
    chat = {"model": body.get("model"), "messages": _chat_messages(body)}
    tools = [{"type": "function", "function": {k: t[k] for k in ("name", "description",
                                                                 "parameters") if k in t}}
             for t in body.get("tools") or () if t.get("type") == "function"]
    if tools:
        chat["tools"] = tools
    conversation = openai_api.read(chat, headers)
    conversation.body = body
    return conversation


def render(reply: Reply, conversation: Conversation) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if reply.text:
        output.append({"type": "message", "id": "msg_stub", "role": "assistant",
                       "status": "completed",
                       "content": [{"type": "output_text", "text": reply.text,
                                    "annotations": []}]})
    output += [{"type": "function_call", "id": f"fc_{id_}", "call_id": id_, "name": name,
                "arguments": json.dumps(args), "status": "completed"}
               for id_, name, args in reply.tool_calls]
    return {"id": "resp_stub", "object": "response", "created_at": 0, "status": "completed",
            "model": conversation.body["model"], "output": output,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": reply.input_tokens,
                      "output_tokens": reply.output_tokens,
                      "total_tokens": reply.input_tokens + reply.output_tokens}}
