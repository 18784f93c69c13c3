"""The scripted provider: deterministic, offline, realistic-looking.

Its answer is a pure function of (provider, model, system prompt, temperature, messages,
max_tokens, params): the request's canonical hash seeds the text, so changing any of them
changes the answer and replaying the same request gives the same answer byte for byte. The
text follows its prompt (``scripted_text``): three bullet points come back as three bullets,
a researcher's notes read like notes, a terse prompt gets one sentence — so a prompt change
shows a meaningful diff. Token counts follow the usual ~4 characters per token.
``params.choices`` makes it answer with one of the given strings (used by routers and
classifiers). ``latency_ms`` sleeps to simulate a real model.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from forklab.engine.providers.base import ChatRequest, ChatResponse
from forklab.engine.providers.scripted_text import Stream, compose


def estimate_tokens(text: str) -> int:
    """Approximate token count (~4 characters per token, at least 1 for non-empty text)."""
    return max(1, (len(text) + 3) // 4) if text else 0


class ScriptedProvider:
    name = "scripted"

    def __init__(self, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self._sleep = sleep

    def complete(self, request: ChatRequest) -> ChatResponse:
        seed = hashlib.sha256(request.request_hash.encode()).digest()
        latency = float(request.latency_ms)
        if latency:
            self._sleep(latency / 1000)
        text = self._text(request, seed)
        prompt_text = request.system_prompt + "".join(
            str(m.get("content", "")) for m in request.messages
        )
        return ChatResponse(
            text=text,
            input_tokens=estimate_tokens(prompt_text) + 4 * (len(request.messages) + 1),
            output_tokens=estimate_tokens(text),
            latency_ms=latency,
        )

    @staticmethod
    def _text(request: ChatRequest, seed: bytes) -> str:
        choices = request.params.get("choices")
        if choices:
            return str(choices[int.from_bytes(seed[:4], "big") % len(choices)])
        users = [str(m.get("content", "")) for m in request.messages if m.get("role") == "user"]
        return compose(request.system_prompt, users[-1] if users else "", Stream(seed),
                       max_words=max(8, int(request.max_tokens * 0.75)))
