"""Provider protocol: how the engine talks to a model.

A provider turns a :class:`ChatRequest` into a :class:`ChatResponse`. Requests are plain
data; their ``request_hash`` (canonical JSON of every field that can change the answer) is
what recordings are matched on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from forklab.engine.canonical import fingerprint


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatRequest:
    provider: str
    model: str
    system_prompt: str
    temperature: float
    messages: tuple[dict[str, Any], ...]
    max_tokens: int = 256
    params: dict[str, Any] = field(default_factory=dict)
    latency_ms: int = 0  # simulated latency; not part of the request's identity

    @property
    def request_hash(self) -> str:
        """Fingerprint of every field but ``latency_ms`` (equal to hashing ``asdict`` of
        them: canonical JSON serialises tuples as lists, so nothing needs copying first)."""
        return fingerprint({
            "provider": self.provider, "model": self.model, "system_prompt": self.system_prompt,
            "temperature": self.temperature, "messages": self.messages,
            "max_tokens": self.max_tokens, "params": self.params,
        })


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallRequest:
    """One tool call a model asked for: the provider's call id, the tool's name and the
    arguments as the model wrote them (decoded JSON when they parse, else the raw text)."""

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatResponse:
    """A model's reply. Invariant: a reply that asks for tool calls carries them in
    ``tool_calls`` (``text`` may then be empty) — it is never an empty answer."""

    text: str
    input_tokens: int
    output_tokens: int
    latency_ms: float = 0.0
    tool_calls: tuple[ToolCallRequest, ...] = ()
    finish_reason: str | None = None


class Provider(Protocol):
    """A model client. ``complete`` raises ``ProviderError`` on failure; never returns None."""

    name: str

    def complete(self, request: ChatRequest) -> ChatResponse: ...
