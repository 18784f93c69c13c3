"""OpenAI-compatible chat-completions client (OpenAI, Ollama, vLLM, llama.cpp server).

Speaks ``POST {base_url}/chat/completions`` over httpx. The provider-neutral conversation is
translated to Chat Completions: an assistant message's ``tool_calls`` become
``{"id", "type": "function", "function": {"name", "arguments": <JSON text>}}``, a tool
message becomes ``{"role": "tool", "tool_call_id", "content"}``; tools are offered as
``{"type": "function", "function": {"name", "description", "parameters"}}``;
``tool_choice`` ``{"name": X}`` becomes ``{"type": "function", "function": {"name": X}}``;
``parallel_tool_calls`` and ``tool_choice`` are sent only with tools; ``response_format`` (a JSON Schema) becomes
``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``. Other ``params``
pass through as body fields (``choices``, the scripted provider's, excepted). A field named
in the request's ``unsent`` (``temperature``, ``max_tokens``) is left out: the vendor's
default applies.

Retries and failures are :mod:`forklab.engine.providers.http`'s: a malformed body, an HTTP
error status or a refused connection raises ``ProviderError``; a timeout
``ProviderTimeout``; the engine records them as a failed call, never as a traceback.
"""

from __future__ import annotations

import contextlib
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

# Chat Completions' finish reasons are the normalized ones; "function_call" is its old name
_FINISH = {"function_call": "tool_calls"}


class OpenAICompatibleProvider:
    name = "openai"

    def __init__(
        self,
        *,
        base_url: str = "http://127.0.0.1:11434/v1",
        api_key: str | None = None,
        organization: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
        random: Callable[[], float] = _random.random,
    ) -> None:
        import httpx  # on first use, not with the engine: httpx (with click, rich and
        # pygments, which its CLI pulls in) was a quarter of the engine's imported heap —
        # objects every full garbage collection walks — and most runs never make HTTP calls

        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if organization:
            headers["OpenAI-Organization"] = organization
        self.headers, self.timeout_s, self.max_retries = headers, timeout_s, max_retries
        self._poster = JsonPoster(
            client=client or httpx.Client(timeout=timeout_s, headers=headers),
            timeout_s=timeout_s, policy=RetryPolicy(max_retries=max_retries),
            sleep=sleep, random=random)

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The Chat Completions request body for ``request``."""
        messages: list[dict[str, Any]] = []
        if request.system_prompt:
            messages.append({"role": "system", "content": request.system_prompt})
        messages.extend(_message(m) for m in request.messages)
        body: dict[str, Any] = {"model": request.model, "messages": messages}
        if "temperature" not in request.unsent:
            body["temperature"] = request.temperature
        # newer models refuse max_tokens beside max_completion_tokens (a captured param)
        if "max_tokens" not in request.unsent and "max_completion_tokens" not in request.params:
            body["max_tokens"] = request.max_tokens
        if request.tools:
            body["tools"] = [{"type": "function", "function": tool.to_wire()}
                             for tool in request.tools]
            if request.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = request.parallel_tool_calls
            if request.tool_choice is not None:  # the API refuses a choice among no tools
                body["tool_choice"] = _tool_choice(request.tool_choice)
        if request.response_format is not None:
            body["response_format"] = _response_format(request.response_format)
        body.update({k: v for k, v in request.params.items() if k not in ("choices",)})
        return body

    def complete(self, request: ChatRequest) -> ChatResponse:
        started = time.perf_counter()
        url = f"{self.base_url}/chat/completions"
        text, attempts = self._poster.post(url, self.body(request))
        data, answer, tool_calls, finish = _parse(url, text, attempts)
        usage = data.get("usage") or {}
        prompt = request.system_prompt + "".join(str(m.get("content") or "")
                                                 for m in request.messages)
        return ChatResponse(
            text=answer,
            input_tokens=int(usage.get("prompt_tokens") or estimate_tokens(prompt)),
            output_tokens=int(usage.get("completion_tokens") or estimate_tokens(answer)),
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
            tool_calls=tool_calls,
            finish_reason=finish,
            attempts=attempts,
        )


def _parse(url: str, text: str, attempts: tuple[Attempt, ...],
           ) -> tuple[dict[str, Any], str, tuple[ToolCallRequest, ...], str | None]:
    try:
        data = json.loads(text)
        choice = data["choices"][0]
        message = choice["message"]
        tool_calls = _tool_calls(message.get("tool_calls"))
        # a reply asking for tools may carry no content at all; any other must
        answer = (message.get("content") if tool_calls else message["content"]) or ""
        if not isinstance(answer, str):
            raise TypeError(answer)
        finish = choice.get("finish_reason")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise malformed(url, "choices[0].message.content or tool_calls", text,
                        attempts) from None
    if finish is None and tool_calls:
        finish = "tool_calls"
    return data, answer, tool_calls, _FINISH.get(finish, finish)


def _message(message: Message) -> dict[str, Any]:
    """One provider-neutral message in Chat Completions' form."""
    role = message["role"]
    if role == "tool":
        return {"role": "tool", "tool_call_id": message["tool_call_id"],
                "content": str(message.get("content", ""))}
    if role == "assistant" and message.get("tool_calls"):
        return {"role": "assistant", "content": message.get("content") or None,
                "tool_calls": [
                    {"id": call["id"], "type": "function",
                     "function": {"name": call["name"],
                                  "arguments": _arguments_text(call.get("arguments"))}}
                    for call in message["tool_calls"]]}
    return {"role": role, "content": message["content"]}


def _arguments_text(arguments: Any) -> str:
    """Arguments as the JSON text Chat Completions carries; raw text the model wrote (not
    JSON) goes back as it was."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps({} if arguments is None else arguments, ensure_ascii=False)


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, dict):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _response_format(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema as Chat Completions' structured output, named by its ``title`` (else
    ``response``). Strict mode is asked for when the schema is written for it at its top
    (every property required, ``additionalProperties: false``): strict refuses any other
    schema, and a looser one is still a useful instruction."""
    properties = schema.get("properties")
    strict = (schema.get("additionalProperties") is False and isinstance(properties, dict)
              and set(schema.get("required") or ()) == set(properties))
    name = str(schema.get("title") or "response")
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:64]
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema,
                                                   "strict": strict}}


def _tool_calls(raw: Any) -> tuple[ToolCallRequest, ...]:
    """The tool calls of a Chat Completions message (``[]`` / None: none). Arguments are
    decoded when they are JSON, kept as the model's text otherwise (the loop reports them
    back to the model as invalid, never drops them)."""
    calls = []
    for item in raw or ():
        function = item["function"]
        arguments = function.get("arguments") or ""
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        calls.append(ToolCallRequest(id=str(item.get("id") or ""), name=str(function["name"]),
                                     arguments=arguments))
    return tuple(calls)
