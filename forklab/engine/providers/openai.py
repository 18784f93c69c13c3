"""OpenAI-compatible chat-completions client (OpenAI, Ollama, vLLM, llama.cpp server).

Speaks ``POST {base_url}/chat/completions`` over httpx. Failures (connection, HTTP status,
malformed body) raise :class:`ProviderError` with the status and the server's message; the
engine records them as a failed node, never as an escaping traceback.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

from forklab.engine.errors import ProviderError
from forklab.engine.providers.base import ChatRequest, ChatResponse, ToolCallRequest
from forklab.engine.providers.scripted import estimate_tokens

if TYPE_CHECKING:
    import httpx


class OpenAICompatibleProvider:
    name = "openai"

    def __init__(
        self,
        *,
        base_url: str = "http://127.0.0.1:11434/v1",
        api_key: str | None = None,
        timeout_s: float = 60.0,
        client: httpx.Client | None = None,
    ) -> None:
        import httpx  # on first use, not with the engine: httpx (with click, rich and
        # pygments, which its CLI pulls in) was a quarter of the engine's imported heap —
        # objects every full garbage collection walks — and most runs never make HTTP calls

        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(timeout=timeout_s, headers=headers)

    def _body(self, request: ChatRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system_prompt:
            messages.append({"role": "system", "content": request.system_prompt})
        messages.extend({"role": m["role"], "content": m["content"]} for m in request.messages)
        body: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
        }
        body.update({k: v for k, v in request.params.items() if k not in ("choices",)})
        return body

    def complete(self, request: ChatRequest) -> ChatResponse:
        import httpx  # imported by __init__ already: a dictionary lookup

        started = time.perf_counter()
        url = f"{self.base_url}/chat/completions"
        try:
            response = self._client.post(url, json=self._body(request))
        except httpx.HTTPError as exc:
            raise ProviderError(
                f"cannot reach {url}: {exc}; is the server running?", url=url
            ) from None
        if response.status_code >= 400:
            raise ProviderError(
                f"{url} answered HTTP {response.status_code}: {response.text[:300]}",
                url=url, status=response.status_code,
            )
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice["message"]
            tool_calls = _tool_calls(message.get("tool_calls"))
            # a reply asking for tools may carry no content at all; any other must
            text = (message.get("content") if tool_calls else message["content"]) or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise ProviderError(
                f"{url} returned a body without choices[0].message.content or tool_calls: "
                f"{response.text[:300]}",
                url=url,
            ) from None
        usage = data.get("usage") or {}
        prompt = request.system_prompt + "".join(str(m["content"]) for m in request.messages)
        return ChatResponse(
            text=text,
            input_tokens=int(usage.get("prompt_tokens") or estimate_tokens(prompt)),
            output_tokens=int(usage.get("completion_tokens") or estimate_tokens(text)),
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
            tool_calls=tool_calls,
            finish_reason=choice.get("finish_reason"),
        )


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
