"""Chat Completions as the stub speaks it: strict request checks, the neutral reading, the
reply body, and the error body ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from tests.vendor_stub.model import Conversation, Reply

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ROLES = ("system", "developer", "user", "assistant", "tool")


class Invalid(Exception):
    """A request the real API would refuse with 400 (the message says why)."""


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def read(body: Any, headers: dict[str, str]) -> Conversation:
    """The request as a conversation; raises :class:`Invalid` for a malformed one."""
    if not isinstance(body, dict):
        raise Invalid("the body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Invalid("you must provide a model parameter")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Invalid("'messages' must be a non-empty array")
    neutral = _messages(messages)
    tools = _tools(body.get("tools"))
    if "tool_choice" in body and not tools:
        raise Invalid("'tool_choice' is only allowed when 'tools' are specified")
    if "parallel_tool_calls" in body and not tools:
        raise Invalid("'parallel_tool_calls' is only allowed when 'tools' are specified")
    choice, forced = _choice(body.get("tool_choice"), {t["name"] for t in tools})
    temperature = body.get("temperature", 1)
    if not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
        raise Invalid(f"'temperature' must be a number between 0 and 2, got {temperature!r}")
    for key in ("max_tokens", "max_completion_tokens"):
        if key in body and (not isinstance(body[key], int) or body[key] < 1):
            raise Invalid(f"'{key}' must be a positive integer")
    return Conversation(body=body, messages=neutral, tools=tools, choice=choice, forced=forced,
                        parallel=body.get("parallel_tool_calls", True) is not False,
                        schema=_schema(body.get("response_format")))


def _messages(messages: list[Any]) -> list[dict[str, Any]]:
    neutral: list[dict[str, Any]] = []
    pending: list[str] = []  # tool calls of the last assistant message not answered yet
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise Invalid(f"{where}: role must be one of {', '.join(ROLES)}")
        role = message["role"]
        if role != "tool" and pending:
            raise Invalid("An assistant message with 'tool_calls' must be followed by tool "
                          f"messages responding to each 'tool_call_id'. Missing: {pending}")
        if role == "tool":
            call = message.get("tool_call_id")
            if call not in pending:
                raise Invalid(f"Invalid parameter: {where}: messages with role 'tool' must be "
                              "a response to a preceeding message with 'tool_calls'.")
            pending.remove(call)
            neutral.append({"role": "tool", "tool_call_id": call,
                            "content": _text(message.get("content"), where)})
            continue
        content = message.get("content")
        if role == "assistant" and message.get("tool_calls"):
            calls = _assistant_calls(message["tool_calls"], where)
            pending = [c["id"] for c in calls]
            neutral.append({"role": "assistant", "content": _text(content, where, True),
                            "tool_calls": calls})
            continue
        neutral.append({"role": role, "content": _text(content, where, role == "assistant")})
    if pending:
        raise Invalid(f"tool calls {pending} were never answered by tool messages")
    return neutral


def _text(content: Any, where: str, nullable: bool = False) -> str:
    if content is None and nullable:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise Invalid(f"{where}.content: expected a string or an array of text parts")


def _assistant_calls(raw: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise Invalid(f"{where}.tool_calls: expected an array")
    calls = []
    for call in raw:
        function = call.get("function") if isinstance(call, dict) else None
        if (not isinstance(function, dict) or call.get("type") != "function"
                or not isinstance(call.get("id"), str)
                or not isinstance(function.get("name"), str)
                or not isinstance(function.get("arguments"), str)):
            raise Invalid(f"{where}.tool_calls: each needs id, type 'function' and "
                          "function.{name, arguments} with arguments a JSON string")
        calls.append({"id": call["id"], "name": function["name"],
                      "arguments": function["arguments"]})
    return calls


def _tools(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise Invalid("'tools' must be an array")
    tools = []
    for index, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(function, dict):
            raise Invalid(f"tools[{index}]: expected {{type: 'function', function: {{…}}}}")
        name = function.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise Invalid(f"tools[{index}].function.name: '{name}' does not match "
                          "'^[a-zA-Z0-9_-]{1,64}$'")
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            raise Invalid(f"tools[{index}].function.parameters: must be an object schema")
        tools.append({"name": name, "parameters": parameters})
    return tools


def _choice(raw: Any, names: set[str]) -> tuple[str | None, str | None]:
    if raw is None or raw in ("auto", "required", "none"):
        return raw, None
    if (isinstance(raw, dict) and raw.get("type") == "function"
            and isinstance(raw.get("function"), dict)):
        name = raw["function"].get("name")
        if name not in names:
            raise Invalid(f"tool_choice names function '{name}', which is not in 'tools'")
        return "function", name
    raise Invalid(f"'tool_choice': unsupported value {raw!r}")


def _schema(raw: Any) -> dict[str, Any] | None:
    if raw is None or raw == {"type": "text"}:
        return None
    spec = raw.get("json_schema") if isinstance(raw, dict) else None
    if raw.get("type") != "json_schema" or not isinstance(spec, dict):
        raise Invalid("'response_format': expected {type: 'json_schema', json_schema: {…}}")
    if not isinstance(spec.get("name"), str) or not NAME.match(spec["name"]):
        raise Invalid("'response_format.json_schema.name' is required ([a-zA-Z0-9_-]{1,64})")
    if not isinstance(spec.get("schema"), dict):
        raise Invalid("'response_format.json_schema.schema' must be an object")
    return dict(spec["schema"])


def render(reply: Reply, conversation: Conversation) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None,
                               "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": id_, "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for id_, name, args in reply.tool_calls]
    return {
        "id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
        "model": conversation.body["model"],
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
        "usage": {"prompt_tokens": reply.input_tokens,
                  "completion_tokens": reply.output_tokens,
                  "total_tokens": reply.input_tokens + reply.output_tokens},
    }
