"""The scripted provider: deterministic, offline, realistic-looking.

Its answer is a pure function of the request (provider, model, system prompt, temperature,
messages, max_tokens, params, and — when set — tools, tool_choice, parallel_tool_calls and
response_format): the request's canonical hash seeds the text, so changing any of them
changes the answer and replaying the same request gives the same answer byte for byte. The
text follows its prompt (``scripted_text``): three bullet points come back as three bullets,
a researcher's notes read like notes, a terse prompt gets one sentence — so a prompt change
shows a meaningful diff. Token counts follow the usual ~4 characters per token.
``params.choices`` makes it answer with one of the given strings (used by routers and
classifiers). ``latency_ms`` sleeps to simulate a real model.

Offered tools, it behaves like a model in a tool loop (``scripted_tools``): it asks for the
tools whose arguments the conversation fills — ids from the user's words, values from
earlier tool results — never twice with the same arguments, then answers from the results.
Given ``response_format`` (a JSON Schema), its answer is a JSON document valid against it
(``scripted_schema``). ``finish_reason`` is ``tool_calls`` or ``stop``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable

from forklab.engine.providers.base import ChatRequest, ChatResponse, Message
from forklab.engine.providers.scripted_schema import document
from forklab.engine.providers.scripted_text import Stream, compose
from forklab.engine.providers.scripted_tools import results_summary, tool_calls


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
        calls = tool_calls(request)
        text = "" if calls else self._text(request, seed)
        asked = "".join(json.dumps([c.name, c.arguments], sort_keys=True) for c in calls)
        return ChatResponse(
            text=text,
            input_tokens=_input_tokens(request),
            output_tokens=estimate_tokens(text + asked) + 3 * len(calls),
            latency_ms=latency,
            tool_calls=calls,
            finish_reason="tool_calls" if calls else "stop",
        )

    @staticmethod
    def _text(request: ChatRequest, seed: bytes) -> str:
        choices = request.params.get("choices")
        if choices:
            return str(choices[int.from_bytes(seed[:4], "big") % len(choices)])
        if request.response_format is not None:
            return json.dumps(document(request.response_format, request.messages,
                                       request.system_prompt, Stream(seed)),
                              ensure_ascii=False)
        users = [str(m.get("content", "")) for m in request.messages if m.get("role") == "user"]
        text = compose(request.system_prompt, users[-1] if users else "", Stream(seed),
                       max_words=max(8, int(request.max_tokens * 0.75)))
        found = results_summary(request.messages) if request.tools else ""
        if not found:
            return text
        greeting, blank, body = text.partition("\n\n")  # a support reply opens "Hi there,"
        if blank and greeting.endswith(","):
            return f"{greeting}\n\n{found} {body}"
        return f"{found} {text}"


def _input_tokens(request: ChatRequest) -> int:
    """What a chat API would count: every message's text (tool calls as JSON), the offered
    tools' definitions, and a few tokens of framing per message — equal to the count
    before tools existed for a request without them."""
    prompt_text = request.system_prompt + "".join(_message_text(m) for m in request.messages)
    tools = "".join(json.dumps(t.to_wire(), sort_keys=True) for t in request.tools)
    return (estimate_tokens(prompt_text) + 4 * (len(request.messages) + 1)
            + estimate_tokens(tools) + (8 if request.tools else 0))


def _message_text(message: Message) -> str:
    text = str(message.get("content", ""))
    calls = message.get("tool_calls")
    return text + (json.dumps(calls, sort_keys=True, default=str) if calls else "")
