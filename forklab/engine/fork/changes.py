"""Changes: what a fork alters (SPEC §3.3).

Each builder returns a frozen pydantic model with a ``kind``; ``wire()`` gives the plain JSON
form stored as the fork's ``fork_mutations``, and :func:`parse_changes` reads it back, so a
fork is reproducible from its record. Structural limits (64 KiB, 16 levels, 200 keys,
redaction placeholders) are checked on the wire form before anything else.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from forklab.engine.errors import InvalidChange, InvalidOverrides

MAX_BYTES = 64 * 1024
MAX_DEPTH = 16
MAX_KEYS = 200
REDACTION_PLACEHOLDERS = ("[REDACTED]", "[redacted: mask failed]")

CONFIG_KINDS = frozenset({"model", "prompt", "temperature", "config"})
"""Kinds that change the graph (promotable); the rest change state."""


class _Change(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def describe(self) -> str:
        """One human line; every kind overrides it with its target and value."""
        return str(getattr(self, "kind", "change"))


class ModelChange(_Change):
    kind: Literal["model"] = "model"
    target: str
    model: str
    provider: str | None = None

    def describe(self) -> str:
        return f"model of {self.target!r} -> {self.model}"


class PromptChange(_Change):
    kind: Literal["prompt"] = "prompt"
    target: str
    system_prompt: str

    def describe(self) -> str:
        return f"prompt of {self.target!r}"


class TemperatureChange(_Change):
    kind: Literal["temperature"] = "temperature"
    target: str
    temperature: float = Field(ge=0.0, le=2.0)

    def describe(self) -> str:
        return f"temperature of {self.target!r} -> {self.temperature}"


class MemoryChange(_Change):
    kind: Literal["memory"] = "memory"
    set: dict[str, Any] = Field(default_factory=dict)
    delete: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        keys = [f"={k}" for k in self.set] + [f"-{k}" for k in self.delete]
        return f"memory {' '.join(keys)}"


class ConfigChange(_Change):
    kind: Literal["config"] = "config"
    node: str
    patch: dict[str, Any]

    def describe(self) -> str:
        return f"config of {self.node!r} ({', '.join(self.patch)})"


class RouteChange(_Change):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    kind: Literal["route"] = "route"
    source: str = Field(alias="from")
    to: str
    once: bool = False

    def describe(self) -> str:
        return f"route {self.source!r} -> {self.to!r}{' once' if self.once else ''}"


class OutputChange(_Change):
    kind: Literal["output"] = "output"
    node: str
    memory: dict[str, Any]

    def describe(self) -> str:
        return f"output of {self.node!r}"


class ToolChange(_Change):
    kind: Literal["tool"] = "tool"
    node: str
    result: Any

    def describe(self) -> str:
        return f"tool result of {self.node!r}"


class HumanResponseChange(_Change):
    kind: Literal["human_response"] = "human_response"
    decision: Literal["approved", "rejected", "edited"]
    data: Any = None
    memory_updates: dict[str, Any] = Field(default_factory=dict)

    def describe(self) -> str:
        return f"human response {self.decision}"


class InputPatchChange(_Change):
    kind: Literal["input_patch"] = "input_patch"
    patch: dict[str, Any]

    def describe(self) -> str:
        return f"input patch ({', '.join(self.patch)})"


Change = Annotated[
    ModelChange | PromptChange | TemperatureChange | MemoryChange | ConfigChange | RouteChange
    | OutputChange | ToolChange | HumanResponseChange | InputPatchChange,
    Field(discriminator="kind"),
]
_ADAPTER: TypeAdapter[Change] = TypeAdapter(Change)
KINDS = ("model", "prompt", "temperature", "memory", "config", "route", "output", "tool",
         "human_response", "input_patch")


def _build[C: _Change](cls: type[C], **fields: Any) -> C:
    """Validate a builder's fields; a bad value is an InvalidChange, like its wire form."""
    try:
        return cls.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(root)"
        kind = cls.model_fields["kind"].default
        raise InvalidChange(f"{kind} change, field '{field}': {err['msg']}", kind=kind,
                            field=field) from None


class change:
    """Builders for the declarative change spec (SPEC §3.3); bad values raise InvalidChange."""

    @staticmethod
    def model(target: str, model: str, provider: str | None = None) -> ModelChange:
        return _build(ModelChange, target=target, model=model, provider=provider)

    @staticmethod
    def prompt(target: str, system_prompt: str) -> PromptChange:
        return _build(PromptChange, target=target, system_prompt=system_prompt)

    @staticmethod
    def temperature(target: str, t: float) -> TemperatureChange:
        return _build(TemperatureChange, target=target, temperature=t)

    @staticmethod
    def memory(set: dict[str, Any] | None = None, delete: list[str] | None = None) -> MemoryChange:
        return _build(MemoryChange, set=set or {}, delete=delete or [])

    @staticmethod
    def config(node: str, patch: dict[str, Any]) -> ConfigChange:
        return _build(ConfigChange, node=node, patch=patch)

    @staticmethod
    def route(from_: str, to: str, once: bool = False) -> RouteChange:
        return _build(RouteChange, **{"from": from_, "to": to, "once": once})

    @staticmethod
    def output(node: str, memory: dict[str, Any]) -> OutputChange:
        return _build(OutputChange, node=node, memory=memory)

    @staticmethod
    def tool(node: str, result: Any) -> ToolChange:
        return _build(ToolChange, node=node, result=result)

    @staticmethod
    def human_response(decision: str, data: Any = None,
                       memory_updates: dict[str, Any] | None = None) -> HumanResponseChange:
        return _build(HumanResponseChange, decision=decision, data=data,
                      memory_updates=memory_updates or {})

    @staticmethod
    def input_patch(patch: dict[str, Any]) -> InputPatchChange:
        return _build(InputPatchChange, patch=patch)


# -- limits ------------------------------------------------------------------------------------


def _walk(value: Any, depth: int, counts: list[int]) -> None:
    if depth > MAX_DEPTH:
        raise InvalidOverrides(
            f"change spec is nested deeper than {MAX_DEPTH} levels; flatten it",
            limit="depth", max=MAX_DEPTH,
        )
    if isinstance(value, dict):
        counts[0] += len(value)
        for v in value.values():
            _walk(v, depth + 1, counts)
    elif isinstance(value, list):
        for v in value:
            _walk(v, depth + 1, counts)
    elif isinstance(value, str) and _is_placeholder(value):
        raise InvalidOverrides(
            f"change spec holds the redaction placeholder {value!r}; send the whole real "
            "value instead of a redacted one",
            limit="redaction",
        )


def _is_placeholder(text: str) -> bool:
    stripped = text.strip()
    if stripped in REDACTION_PLACEHOLDERS:
        return True
    head, sep, tail = stripped.partition("#")
    return head == "[REDACTED]" and bool(sep) and tail.isdigit()


def check_limits(spec: Any) -> None:
    """Refuse specs over 64 KiB, 16 levels, 200 object keys, or holding a placeholder."""
    size = len(json.dumps(spec, ensure_ascii=False).encode())
    if size > MAX_BYTES:
        raise InvalidOverrides(
            f"change spec is {size} bytes; the limit is {MAX_BYTES} (64 KiB)",
            limit="bytes", max=MAX_BYTES, found=size,
        )
    counts = [0]
    _walk(spec, 1, counts)
    if counts[0] > MAX_KEYS:
        raise InvalidOverrides(
            f"change spec has {counts[0]} object keys; the limit is {MAX_KEYS}",
            limit="keys", max=MAX_KEYS, found=counts[0],
        )


def parse_change(data: Any) -> Change:
    """One change from its JSON form (a built change passes through)."""
    if isinstance(data, _Change):
        return data  # type: ignore[return-value]
    if not isinstance(data, dict) or "kind" not in data:
        raise InvalidChange(
            f"a change is an object with a 'kind' (one of: {', '.join(KINDS)}); got "
            f"{json.dumps(data)[:100]}",
        )
    if data["kind"] not in KINDS:
        raise InvalidChange(
            f"unknown change kind {data['kind']!r}; expected one of: {', '.join(KINDS)}",
            kind=data["kind"],
        )
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"][1:]) or "(root)"
        raise InvalidChange(
            f"{data['kind']} change, field '{field}': {err['msg']}", kind=data["kind"],
            field=field,
        ) from None


def parse_changes(data: Any) -> list[Change]:
    """A list of changes (or one) from wire form, with the structural limits checked first."""
    items = data if isinstance(data, (list, tuple)) else [data]
    wire = [c.wire() if isinstance(c, _Change) else c for c in items]
    check_limits(wire)
    return [parse_change(item) for item in wire]


def wire(changes: list[Change]) -> list[dict[str, Any]]:
    return [c.wire() for c in changes]
