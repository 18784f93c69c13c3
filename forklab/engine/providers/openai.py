"""OpenAI-compatible chat-completions client (OpenAI, Ollama, vLLM, llama.cpp server).

Speaks ``POST {base_url}/chat/completions`` over httpx. Failures (connection, HTTP status,
malformed body) raise :class:`ProviderError` with the status and the server's message; the
engine records them as a failed node, never as an escaping traceback.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from forklab.engine.errors import ProviderError
from forklab.engine.providers.base import ChatRequest, ChatResponse
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
            text = data["choices"][0]["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError):
            raise ProviderError(
                f"{url} returned a body without choices[0].message.content: "
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
        )
