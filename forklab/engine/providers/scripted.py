"""The scripted provider: deterministic, offline, realistic-looking.

Its answer is a pure function of (provider, model, system prompt, temperature, messages,
max_tokens, params): the request's canonical hash seeds the text, so changing any of them
changes the answer and replaying the same request gives the same answer byte for byte.
Token counts follow the usual ~4 characters per token. ``params.choices`` makes it answer
with one of the given strings (used by routers and classifiers). ``latency_ms`` sleeps to
simulate a real model.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from forklab.engine.providers.base import ChatRequest, ChatResponse

_WORDS = ["the", "model", "considers", "evidence", "immune", "system", "antibodies", "response", "cells", "vaccine", "trains", "recognise", "pathogen", "memory", "protein", "safely", "without", "illness", "dose", "booster", "clear", "concise", "summary", "therefore", "because", "evidence", "shows", "results", "data", "review", "draft", "customer", "order", "refund", "priority", "account", "issue", "billing", "shipping", "update", "steps", "next", "analysis", "approach", "risk", "option", "recommend", "careful", "plan", "branch", "combine", "final", "answer", "source", "claims", "verify", "context", "detail", "example", "note", "section", "key", "point", "overall"]


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
        limit = max(8, min(request.max_tokens, 400))
        count = 12 + int.from_bytes(seed[:2], "big") % max(1, limit // 2)
        stream = hashlib.sha256(seed).digest()
        words: list[str] = []
        while len(words) < count:
            stream = hashlib.sha256(stream).digest()
            words.extend(_WORDS[b % len(_WORDS)] for b in stream)
        words = words[:count]
        sentences, start = [], 0
        while start < len(words):
            end = min(len(words), start + 8 + seed[start % len(seed)] % 8)
            sentence = " ".join(words[start:end])
            sentences.append(sentence[0].upper() + sentence[1:] + ".")
            start = end
        return " ".join(sentences)
