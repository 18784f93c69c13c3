"""The Messages API as the stub speaks it: strict request checks (alternating roles, a
first user message, every ``tool_use`` answered by a ``tool_result`` in the very next user
message, ``max_tokens`` present, …), the neutral reading, the reply body, and the error
body ``{"type": "error", "error": {"type", "message"}}``."""

from __future__ import annotations

import re
from typing import Any

from tests.vendor_stub.model import Conversation, Reply
from tests.vendor_stub.openai_api import Invalid

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}$")  # forklab sends 2023-06-01; newer SDKs newer


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message},
            "request_id": "req_stub"}


def read(body: Any, headers: dict[str, str]) -> Conversation:
    """The request as a conversation; raises :class:`Invalid` for a malformed one."""
    if not VERSION.match(headers.get("anthropic-version", "")):
        raise Invalid("anthropic-version: header is required (e.g. 2023-06-01)")
    if not isinstance(body, dict):
        raise Invalid("the body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Invalid("model: Field required")
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        raise Invalid("max_tokens: Field required (a positive integer)")
    temperature = body.get("temperature", 1)
    if not isinstance(temperature, int | float) or not 0 <= temperature <= 1:
        raise Invalid("temperature: Input should be less than or equal to 1")
    system = body.get("system", "")
    if isinstance(system, list):
        system = "".join(b.get("text", "") for b in system if isinstance(b, dict))
    if not isinstance(system, str):
        raise Invalid("system: Input should be a valid string or a list of text blocks")
    tools = _tools(body.get("tools"))
    choice, forced, parallel = _choice(body.get("tool_choice"), tools)
    neutral = [{"role": "system", "content": system}] if system else []
    neutral += _messages(body.get("messages"))
    return Conversation(body=body, messages=neutral, tools=tools, choice=choice,
                        forced=forced, parallel=parallel, schema=_schema(body))


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        if not content:
            raise Invalid(f"{where}: all messages must have non-empty content")
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise Invalid(f"{where}.content: expected a non-empty string or list of blocks")
    for index, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
            raise Invalid(f"{where}.content.{index}.text: text content blocks must be "
                          "non-empty")
        if kind not in ("text", "tool_use", "tool_result"):
            raise Invalid(f"{where}.content.{index}: unsupported block type {kind!r}")
    return list(content)


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise Invalid("messages: at least one message is required")
    neutral: list[dict[str, Any]] = []
    pending: list[str] = []  # tool_use ids of the previous assistant message
    for index, message in enumerate(raw):
        where = f"messages.{index}"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise Invalid(f"{where}.role: Input should be 'user' or 'assistant'")
        if index == 0 and role != "user":
            raise Invalid("messages: first message must use the \"user\" role")
        if index and raw[index - 1].get("role") == role:
            raise Invalid("messages: roles must alternate between \"user\" and \"assistant\"")
        blocks = _blocks(message.get("content"), where)
        if role == "assistant":
            neutral.append(_assistant(blocks, where))
            pending = [c["id"] for c in neutral[-1].get("tool_calls", ())]
            continue
        neutral += _user(blocks, pending, where)
        pending = []
    return neutral


def _assistant(blocks: list[dict[str, Any]], where: str) -> dict[str, Any]:
    if any(b["type"] == "tool_result" for b in blocks):
        raise Invalid(f"{where}: tool_result blocks are only allowed in user messages")
    calls = []
    for block in blocks:
        if block["type"] == "tool_use":
            if (not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str)
                    or not isinstance(block.get("input"), dict)):
                raise Invalid(f"{where}: tool_use blocks need id, name and an object input")
            calls.append({"id": block["id"], "name": block["name"], "arguments": block["input"]})
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return message


def _user(blocks: list[dict[str, Any]], pending: list[str], where: str,
          ) -> list[dict[str, Any]]:
    results = [b for b in blocks if b["type"] == "tool_result"]
    if any(b["type"] == "tool_use" for b in blocks):
        raise Invalid(f"{where}: tool_use blocks are only allowed in assistant messages")
    if results and blocks[:len(results)] != results:
        raise Invalid(f"{where}: tool_result blocks must come first in the content")
    answered = [b.get("tool_use_id") for b in results]
    for id_ in answered:
        if id_ not in pending:
            raise Invalid(f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                          f"{id_}. Each `tool_result` block must have a corresponding "
                          "`tool_use` block in the previous message.")
    missing = [id_ for id_ in pending if id_ not in answered]
    if missing:
        raise Invalid(f"{where}: `tool_use` ids were found without `tool_result` blocks "
                      f"immediately after: {', '.join(missing)}")
    out: list[dict[str, Any]] = [{"role": "tool", "tool_call_id": b["tool_use_id"],
                                  "content": _result_text(b.get("content"), where)}
                                 for b in results]
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    if text:
        out.append({"role": "user", "content": text})
    return out


def _result_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    raise Invalid(f"{where}: tool_result content must be a string or a list of blocks")


def _tools(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    tools = []
    for index, tool in enumerate(raw if isinstance(raw, list) else [None]):
        if not isinstance(tool, dict) or not NAME.match(str(tool.get("name"))):
            raise Invalid(f"tools.{index}.name: String should match pattern "
                          "'^[a-zA-Z0-9_-]{1,64}$'")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise Invalid(f"tools.{index}.input_schema: Field required (an object schema)")
        tools.append({"name": tool["name"], "parameters": schema})
    return tools


def _choice(raw: Any, tools: list[dict[str, Any]]) -> tuple[str | None, str | None, bool]:
    if raw is None:
        return None, None, True
    if tools == []:
        raise Invalid("tool_choice may only be specified while providing tools")
    kind = raw.get("type") if isinstance(raw, dict) else None
    parallel = not raw.get("disable_parallel_tool_use", False) if isinstance(raw, dict) else True
    if kind == "tool":
        if raw.get("name") not in {t["name"] for t in tools}:
            raise Invalid(f"tool_choice.name: tool {raw.get('name')!r} was not provided")
        return "tool", raw["name"], parallel
    mapped = {"auto": "auto", "any": "required", "none": "none"}
    if kind not in mapped:
        raise Invalid(f"tool_choice.type: unsupported value {kind!r}")
    return mapped[kind], None, parallel


def _schema(body: dict[str, Any]) -> dict[str, Any] | None:
    config = body.get("output_config")
    if config is None:
        return None
    fmt = config.get("format") if isinstance(config, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(
            fmt.get("schema"), dict):
        raise Invalid("output_config.format: expected {type: 'json_schema', schema: {…}}")
    return dict(fmt["schema"])


def render(reply: Reply, conversation: Conversation) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [{"type": "tool_use", "id": id_, "name": name, "input": args}
                for id_, name, args in reply.tool_calls]
    return {
        "id": "msg_stub", "type": "message", "role": "assistant",
        "model": conversation.body["model"], "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }
