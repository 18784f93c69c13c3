"""Provider protocol: how the engine talks to a model.

A provider turns a :class:`ChatRequest` into a :class:`ChatResponse`. Requests are plain
data; their ``request_hash`` (canonical JSON of every field that can change the answer) is
what recordings are matched on.

Messages are provider-neutral dicts, stored as they are in the event log and translated by
each provider into its vendor's dialect::

    {"role": "system", "content": str}
    {"role": "user", "content": str}
    {"role": "assistant", "content": str,            # may be "" when it asks for tools
     "tool_calls": [{"id": str, "name": str, "arguments": dict | str}]}  # key absent: none
    {"role": "tool", "tool_call_id": str, "name": str, "content": str,
     "is_error": bool}                                # is_error optional (default False)

A tool call's ``arguments`` are the decoded JSON the model wrote — normally an object — or
the raw text when it was not JSON (the loop reports that back to the model, never drops it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from forklab.engine.canonical import fingerprint

Message = dict[str, Any]
"""One provider-neutral conversation message (shapes in the module docstring)."""


def _empty_object_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolDefinition:
    """A tool the model is offered: its name, what it does, and the JSON Schema of its
    arguments (an object schema)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=_empty_object_schema)

    def to_wire(self) -> dict[str, Any]:
        """``{"name", "description", "parameters"}`` (how it is hashed and recorded)."""
        return {"name": self.name, "description": self.description,
                "parameters": self.parameters}


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatRequest:
    """One model call. ``tool_choice`` is None (the provider's default), ``"auto"``,
    ``"required"``, ``"none"`` or ``{"name": tool}``; ``parallel_tool_calls`` None leaves the
    provider's default; ``response_format`` is a JSON Schema the answer must follow
    (structured output: the reply's text is then a JSON document)."""

    provider: str
    model: str
    system_prompt: str
    temperature: float
    messages: tuple[Message, ...]
    max_tokens: int = 256
    params: dict[str, Any] = field(default_factory=dict)
    latency_ms: int = 0  # simulated latency; not part of the request's identity
    tools: tuple[ToolDefinition, ...] = ()
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    # request fields the provider leaves out of what it sends, so the vendor's default
    # applies: ``temperature`` / ``max_tokens`` of a call imported from a trace that did not
    # say them (its stored value is then a stand-in, not what the app sent). Not part of the
    # request's identity: a request is what forklab records and matches on
    unsent: frozenset[str] = frozenset()

    @property
    def request_hash(self) -> str:
        """Fingerprint of every field but ``latency_ms`` and ``unsent``.

        Invariant: a request whose tool fields (``tools``, ``tool_choice``,
        ``parallel_tool_calls``, ``response_format``) are all at their defaults hashes
        exactly as before those fields existed — recorded runs are matched on this hash, so
        old logs keep their meaning. Each tool field that is set is added to the hashed
        object under its own name, so the hash covers all of it.
        """
        identity: dict[str, Any] = {
            "provider": self.provider, "model": self.model, "system_prompt": self.system_prompt,
            "temperature": self.temperature, "messages": self.messages,
            "max_tokens": self.max_tokens, "params": self.params,
        }
        if self.tools:
            identity["tools"] = [tool.to_wire() for tool in self.tools]
        if self.tool_choice is not None:
            identity["tool_choice"] = self.tool_choice
        if self.parallel_tool_calls is not None:
            identity["parallel_tool_calls"] = self.parallel_tool_calls
        if self.response_format is not None:
            identity["response_format"] = self.response_format
        return fingerprint(identity)

    @property
    def offers_tools(self) -> bool:
        """True when tools are offered and ``tool_choice`` does not forbid them."""
        return bool(self.tools) and self.tool_choice != "none"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallRequest:
    """One tool call a model asked for: the provider's call id, the tool's name and the
    arguments as the model wrote them (decoded JSON when they parse, else the raw text)."""

    id: str
    name: str
    arguments: Any

    def to_wire(self) -> dict[str, Any]:
        """The call as it sits in an assistant message's ``tool_calls``."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True, kw_only=True, slots=True)
class Attempt:
    """One HTTP attempt of a call: its status (None when no answer came — a refused
    connection, a timeout), a short error text (None for the attempt that succeeded), how
    long it took, and the delay waited before the next attempt (None for the last)."""

    status: int | None
    error: str | None
    latency_ms: float
    retry_after_s: float | None = None

    def to_wire(self) -> dict[str, Any]:
        """``{"status", "error", "latency_ms", "retry_after_s"}``."""
        return {"status": self.status, "error": self.error, "latency_ms": self.latency_ms,
                "retry_after_s": self.retry_after_s}


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatResponse:
    """A model's reply. Invariant: a reply that asks for tool calls carries them in
    ``tool_calls`` (``text`` may then be empty) — it is never an empty answer.

    ``finish_reason`` is normalized: ``stop``, ``tool_calls``, ``length``,
    ``content_filter``, or the provider's own word otherwise (None when it gave none).
    ``attempts`` lists every HTTP attempt made, the successful one last (empty for
    providers that make none, like ``scripted``)."""

    text: str
    input_tokens: int
    output_tokens: int
    latency_ms: float = 0.0
    tool_calls: tuple[ToolCallRequest, ...] = ()
    finish_reason: str | None = None
    attempts: tuple[Attempt, ...] = ()

    def to_message(self) -> Message:
        """The reply as the assistant message that continues the conversation."""
        message: Message = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [call.to_wire() for call in self.tool_calls]
        return message


class Provider(Protocol):
    """A model client. ``complete`` raises ``ProviderError`` (or ``ProviderTimeout``) on
    failure; never returns None."""

    name: str

    def complete(self, request: ChatRequest) -> ChatResponse: ...
