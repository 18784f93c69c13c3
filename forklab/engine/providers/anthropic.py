"""Anthropic Messages API client: ``POST {base_url}/v1/messages`` over httpx.

``base_url`` is the API's root, as the official SDK takes it (default
``https://api.anthropic.com``; a trailing ``/v1`` is accepted too). Headers: ``x-api-key``
and ``anthropic-version: 2023-06-01``.

Translation of the provider-neutral conversation:

- the system prompt (and any ``system`` message) goes in the top-level ``system``;
- an assistant message's ``tool_calls`` become ``tool_use`` blocks ``{type, id, name,
  input}`` after its text (raw, non-JSON arguments travel as ``{"_raw": text}``: the API
  takes only objects);
- tool messages become ``tool_result`` blocks ``{type, tool_use_id, content, is_error?}`` of
  a ``user`` message; consecutive messages of one role (several tool results, a result then
  the user's next words) are merged into one message, as the API requires alternating roles;
- tools are offered as ``{name, description, input_schema}``; ``tool_choice`` ``auto`` /
  ``required`` / ``none`` / ``{"name": X}`` becomes ``{"type": "auto" | "any" | "none" |
  "tool", "name"?}``, with ``disable_parallel_tool_use`` when ``parallel_tool_calls`` is
  False; neither is sent without tools;
- ``response_format`` (a JSON Schema) is the API's structured output,
  ``output_config: {"format": {"type": "json_schema", "schema": …}}``: the answer's text is
  the JSON document (a model without structured outputs answers 400, reported with the
  API's message);
- ``max_tokens`` is always sent (the API requires it: one the request leaves ``unsent`` is
  ``UNSENT_MAX_TOKENS``); an unsent ``temperature`` is left out; other ``params`` pass
  through as body fields (``choices``, the scripted provider's, excepted).

The reply's text blocks are joined into ``text`` and its ``tool_use`` blocks are its
``tool_calls``; ``stop_reason`` is normalized (``end_turn`` / ``stop_sequence`` → ``stop``,
``tool_use`` → ``tool_calls``, ``max_tokens`` → ``length``, ``refusal`` →
``content_filter``); usage is ``usage.input_tokens`` / ``output_tokens``. Retries and
failures are :mod:`forklab.engine.providers.http`'s.
"""

from __future__ import annotations

import json
import random as _random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from forklab.engine.providers.base import (
    Attempt,
    ChatRequest,
    ChatResponse,
    Message,
    ToolCallRequest,
)
from forklab.engine.providers.http import JsonPoster, RetryPolicy, malformed
from forklab.engine.providers.scripted import estimate_tokens

if TYPE_CHECKING:
    import httpx

ANTHROPIC_VERSION = "2023-06-01"
UNSENT_MAX_TOKENS = 4096
"""The ``max_tokens`` sent for a request that leaves it unsent (the API has no default)."""
_STOP = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
         "max_tokens": "length", "refusal": "content_filter"}
_CHOICE = {"auto": "auto", "required": "any", "any": "any", "none": "none"}


class AnthropicProvider:
    name = "anthropic"

    def __init__(
        self,
        *,
        base_url: str = "https://api.anthropic.com",
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
        random: Callable[[], float] = _random.random,
    ) -> None:
        import httpx  # on first use, as the openai provider does

        root = base_url.rstrip("/")
        self.base_url = root[:-3] if root.endswith("/v1") else root
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        self.headers, self.timeout_s, self.max_retries = headers, timeout_s, max_retries
        self._poster = JsonPoster(
            client=client or httpx.Client(timeout=timeout_s, headers=headers),
            timeout_s=timeout_s, policy=RetryPolicy(max_retries=max_retries),
            sleep=sleep, random=random)

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The Messages API request body for ``request``."""
        system = [request.system_prompt] if request.system_prompt else []
        system += [str(m["content"]) for m in request.messages if m["role"] == "system"]
        # the API requires max_tokens: one left unsent (a trace did not say it) is the
        # generous UNSENT_MAX_TOKENS rather than a short stand-in
        limit = UNSENT_MAX_TOKENS if "max_tokens" in request.unsent else request.max_tokens
        body: dict[str, Any] = {"model": request.model, "max_tokens": limit}
        if system:
            body["system"] = "\n\n".join(system)
        body["messages"] = _messages(request.messages)
        if "temperature" not in request.unsent:
            body["temperature"] = request.temperature
        if request.tools:
            body["tools"] = [_tool(tool.to_wire()) for tool in request.tools]
            choice = _tool_choice(request.tool_choice, request.parallel_tool_calls)
            if choice is not None:
                body["tool_choice"] = choice
        if request.response_format is not None:
            body["output_config"] = {"format": {"type": "json_schema",
                                                "schema": request.response_format}}
        body.update({k: v for k, v in request.params.items() if k not in ("choices",)})
        return body

    def complete(self, request: ChatRequest) -> ChatResponse:
        started = time.perf_counter()
        url = f"{self.base_url}/v1/messages"
        text, attempts = self._poster.post(url, self.body(request))
        data, answer, tool_calls = _parse(url, text, attempts)
        usage = data.get("usage") or {}
        prompt = request.system_prompt + "".join(str(m.get("content") or "")
                                                 for m in request.messages)
        stop = data.get("stop_reason")
        return ChatResponse(
            text=answer,
            input_tokens=int(usage.get("input_tokens") or estimate_tokens(prompt)),
            output_tokens=int(usage.get("output_tokens") or estimate_tokens(answer)),
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
            tool_calls=tool_calls,
            finish_reason=_STOP.get(stop, stop) if isinstance(stop, str) else None,
            attempts=attempts,
        )


def _parse(url: str, text: str, attempts: tuple[Attempt, ...],
           ) -> tuple[dict[str, Any], str, tuple[ToolCallRequest, ...]]:
    try:
        data = json.loads(text)
        blocks = data["content"]
        if not isinstance(blocks, list):
            raise TypeError(blocks)
        texts = [str(b["text"]) for b in blocks if b["type"] == "text"]
        calls = tuple(ToolCallRequest(id=str(b["id"]), name=str(b["name"]),
                                      arguments=b.get("input", {}))
                      for b in blocks if b["type"] == "tool_use")
    except (ValueError, KeyError, TypeError, AttributeError):
        raise malformed(url, "a content list of text and tool_use blocks", text,
                        attempts) from None
    return data, "".join(texts), calls


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool["name"]}
    if tool["description"]:
        out["description"] = tool["description"]
    out["input_schema"] = tool["parameters"]
    return out


def _tool_choice(choice: str | dict[str, Any] | None, parallel: bool | None,
                 ) -> dict[str, Any] | None:
    if isinstance(choice, dict):
        out: dict[str, Any] = {"type": "tool", "name": choice["name"]}
    elif choice is None:
        out = {"type": "auto"}
    else:
        out = {"type": _CHOICE.get(choice, choice)}
    if parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    elif choice is None:
        return None  # nothing to say: the API's default
    return out


def _blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    """The role a message takes in the Messages API and its content blocks."""
    role = message["role"]
    if role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message["tool_call_id"],
                                 "content": str(message.get("content", ""))}
        if message.get("is_error"):
            block["is_error"] = True
        return "user", [block]
    content = message.get("content")
    blocks: list[dict[str, Any]] = [{"type": "text", "text": str(content)}] if content else []
    for call in message.get("tool_calls") or () if role == "assistant" else ():
        arguments = call.get("arguments")
        blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"],
                       "input": arguments if isinstance(arguments, dict)
                       else {} if arguments is None else {"_raw": arguments}})
    return role, blocks or [{"type": "text", "text": ""}]


def _messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The conversation without system messages, consecutive same-role messages merged; a
    message holding one text block is sent as a plain string (the API's short form)."""
    merged: list[tuple[str, list[dict[str, Any]]]] = []
    for message in messages:
        if message["role"] == "system":
            continue
        role, blocks = _blocks(message)
        if merged and merged[-1][0] == role:
            merged[-1][1].extend(blocks)
        else:
            merged.append((role, blocks))
    return [{"role": role, "content": blocks[0]["text"]
             if len(blocks) == 1 and blocks[0]["type"] == "text" else blocks}
            for role, blocks in merged]
