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
class ToolDefinition:
    """A tool the model is offered: its name, description and JSON Schema parameters."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}})

    def to_wire(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "parameters": self.parameters}


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatRequest:
    """One model request. ``messages`` are provider-neutral (SPEC §6.1): ``system``,
    ``user``, ``assistant`` (``content`` and optional ``tool_calls`` of ``{id, name,
    arguments}``) and ``tool`` (``tool_call_id``, ``name``, ``content``)."""

    provider: str
    model: str
    system_prompt: str
    temperature: float
    messages: tuple[dict[str, Any], ...]
    max_tokens: int = 256
    params: dict[str, Any] = field(default_factory=dict)
    latency_ms: int = 0  # simulated latency; not part of the request's identity
    tools: tuple[ToolDefinition, ...] = ()
    tool_choice: str | dict[str, Any] | None = None  # auto | required | none | {"name": X}
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None  # a JSON Schema

    @property
    def request_hash(self) -> str:
        """Fingerprint of every field but ``latency_ms`` (equal to hashing ``asdict`` of
        them: canonical JSON serialises tuples as lists, so nothing needs copying first).

        The tool-loop fields enter only when set: a request that offers no tools hashes
        exactly as it did before they existed, so recorded runs keep matching."""
        identity: dict[str, Any] = {
            "provider": self.provider, "model": self.model, "system_prompt": self.system_prompt,
            "temperature": self.temperature, "messages": self.messages,
            "max_tokens": self.max_tokens, "params": self.params,
        }
        if self.tools:
            identity["tools"] = [tool.to_wire() for tool in self.tools]
        for name in ("tool_choice", "parallel_tool_calls", "response_format"):
            value = getattr(self, name)
            if value is not None:
                identity[name] = value
        return fingerprint(identity)


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
