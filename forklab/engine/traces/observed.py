"""What a dialect reader sees in one span, in forklab's provider-neutral call model.

A span is a :class:`ModelCall` (a chat/LLM span), a :class:`ToolExec` (an execute_tool /
TOOL span), a :class:`Gate` (a human gate or subgraph in forklab's own export), a
:class:`Step` (an agent, chain or any other span) or unreadable (a reason).
Messages use the shapes of :mod:`forklab.engine.providers.base`; a field the span did not
capture is ``None`` — never an empty guess — and the call says what is ``missing``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.providers.base import ToolDefinition

Message = dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCall:
    span_id: str
    dialect: str
    provider: str
    model: str
    system_prompt: str | None  # None: not captured (or none was sent)
    messages: list[Message] | None  # the request's conversation; None: not captured
    reply_text: str | None  # None: the reply was not captured
    reply_tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    temperature: float | None = None
    params: dict[str, Any] = field(default_factory=dict)
    tools: list[ToolDefinition] | None = None  # None: the offered tools were not captured
    tool_choice: str | dict[str, Any] | None = None  # forklab's form: "auto" | {"name": T}
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None  # the JSON Schema the answer follows
    input_tokens: int = 0
    output_tokens: int = 0
    capture_hint: str = ""  # how to switch content capture on in this dialect


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolExec:
    span_id: str
    dialect: str
    name: str
    call_id: str | None
    arguments: Any = None  # None: not captured
    result: Any = None  # None: not captured
    captured_arguments: bool = False
    captured_result: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    span_id: str
    name: str  # the agent's or workflow's name when the span gives one, else the span's
    agent: bool = False  # an agent span: it owns the calls below it before any other step
    input: Any = None
    output: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Gate:
    """A human gate's or a subgraph's span in forklab's own export: the events it opened
    and closed with, as (type, payload); ``end`` is None when it never closed."""

    span_id: str
    start: tuple[str, dict[str, Any]]
    end: tuple[str, dict[str, Any]] | None


Call = ModelCall | ToolExec | Gate
"""What a node owns: its calls."""
Observed = ModelCall | ToolExec | Gate | Step


def loads_maybe(value: Any) -> Any:
    """A JSON text decoded, else the value as it is (tool arguments the model wrote)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def tool_definition(raw: Any) -> ToolDefinition | None:
    """A tool definition from OpenAI's ``{"type": "function", "function": {...}}`` form or
    the flat ``{"name", "description", "parameters"}`` one."""
    raw = loads_maybe(raw)
    if not isinstance(raw, dict):
        return None
    nested = raw.get("function")
    body: dict[str, Any] = nested if isinstance(nested, dict) else raw
    name = body.get("name")
    if not isinstance(name, str) or not name:
        return None
    parameters = body.get("parameters")
    return ToolDefinition(name=name, description=str(body.get("description") or ""),
                          parameters=parameters if isinstance(parameters, dict)
                          else {"type": "object", "properties": {}})


def split_system(messages: list[Message]) -> tuple[str | None, list[Message]]:
    """A leading system message as the system prompt (how forklab's own calls hold it)."""
    if messages and messages[0].get("role") == "system" and isinstance(
            messages[0].get("content"), str):
        return messages[0]["content"], messages[1:]
    return None, messages


__all__ = ["Call", "Gate", "Message", "ModelCall", "Observed", "Step", "ToolExec", "loads_maybe",
           "split_system", "tool_definition"]
