"""Changes: what a fork alters (SPEC §3.3).

Each builder returns a frozen pydantic model with a ``kind``; ``wire()`` gives the plain JSON
form stored as the fork's ``fork_mutations``, and :func:`parse_changes` reads it back, so a
fork is reproducible from its record. Structural limits (64 KiB, 16 levels, 200 keys,
redaction placeholders) are checked on the wire form before anything else.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from forklab.engine.calls import CallAddress, looks_like_call_key, parse_call_key
from forklab.engine.errors import InvalidChange, InvalidOverrides
from forklab.engine.graph import AgentSpec
from forklab.engine.inputs import error_path

MAX_BYTES = 64 * 1024
MAX_DEPTH = 16
MAX_KEYS = 200
REDACTION_PLACEHOLDERS = ("[REDACTED]", "[redacted: mask failed]")

Path = tuple[str, ...]
"""What a change writes, for conflict checks (:mod:`~forklab.engine.fork.conflicts`)."""

TARGET = re.compile(r"^(?P<node>[A-Za-z_][\w\-]*)(\.(?P<role>[A-Za-z_]\w*)(\[(?P<i>\d+)\])?)?$")
"""An agent change's target: ``node``, ``node.role`` or ``node.role[i]``."""


def leaves(prefix: Path, patch: Any) -> list[Path]:
    """Every leaf path of a merge patch under ``prefix``."""
    if isinstance(patch, dict) and patch:
        return [leaf for key, value in patch.items() for leaf in leaves((*prefix, str(key)), value)]
    return [prefix]


class _Change(BaseModel):
    """Base of every change kind. Everything outside the engine's apply rules reads a change
    through these per-kind members, so a new kind is a new class in the union (plus its
    apply rule), never a new branch in the API, forms, CLI, estimate or conflict checks."""

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    kind: str
    """The JSON ``kind``: each kind narrows it to its ``Literal`` (the union's discriminator)."""
    promotable: ClassVar[bool] = False
    """Config-type: it changes the graph, so ``promote`` can adopt it (SPEC §3.9)."""

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def describe(self) -> str:
        """One human line; every kind overrides it with its target and value."""
        return self.kind

    def written_paths(self) -> list[Path]:
        """The paths this change writes; two changes of one request whose paths overlap
        conflict (see :mod:`~forklab.engine.fork.conflicts`)."""
        return [("kind", self.kind)]

    def scoped_node(self) -> str | None:
        """The node this change is scoped to (None: the whole run)."""
        return None

    def promotes(self) -> bool:
        """Whether ``promote`` adopts this change into the graph (config-type, whole-node)."""
        return type(self).promotable

    def call_address(self) -> CallAddress | None:
        """The one call this change applies to (SPEC §6.3), or None: not per call."""
        return None


def _call_address(call: str, kind: str) -> CallAddress:
    address = parse_call_key(call)
    if address is None:
        raise InvalidChange(
            f"{kind} change, field 'call': cannot read call key {call!r}; expected "
            "NODE#N/turn:T, NODE#N/turn:T/tool:K or NODE#N/tool:<provider call id> (list "
            "them with forkpoints)", kind=kind, field="call")
    return address


class _CallChange(_Change):
    """A change of one call (SPEC §6.3), addressed by its call key."""

    call: str

    def model_post_init(self, __context: Any) -> None:
        _call_address(self.call, self.kind)

    def call_address(self) -> CallAddress:
        return _call_address(self.call, self.kind)

    def scoped_node(self) -> str | None:
        return self.call_address().node

    def written_paths(self) -> list[Path]:
        return [("call", str(self.call_address()))]


class ToolCallSpec(BaseModel):
    """A tool call a ``reply`` change makes the model ask for."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = ""
    name: str = Field(min_length=1)
    arguments: Any = Field(default_factory=dict)


class ReplyChange(_CallChange):
    """The model's reply at one turn, replaced (label ``simulated``); the loop goes on
    from it: its tool calls are made, or its text is the answer."""

    kind: Literal["reply"] = "reply"
    text: str = ""
    tool_calls: list[ToolCallSpec] | None = None

    def describe(self) -> str:
        return f"reply of {self.call!r}"

    def served_tool_calls(self) -> tuple[dict[str, Any], ...]:
        """The tool calls as a reply carries them; a call given no id gets a stable one."""
        return tuple({"id": c.id or f"reply_{i}", "name": c.name, "arguments": c.arguments}
                     for i, c in enumerate(self.tool_calls or (), start=1))


class ToolResultChange(_CallChange):
    """One tool call's result, replaced (label ``simulated``)."""

    kind: Literal["tool_result"] = "tool_result"
    result: Any

    def describe(self) -> str:
        return f"result of {self.call!r}"


class RerunChange(_CallChange):
    """A call the fork would serve from the recording runs live instead (a write tool call
    still obeys the side-effect policy)."""

    kind: Literal["rerun"] = "rerun"

    def describe(self) -> str:
        return f"rerun {self.call!r} live"


class MessageSpec(BaseModel):
    """One request message a ``messages`` change sends (the provider-neutral shapes of
    :mod:`forklab.engine.providers.base`): ``tool_calls`` only on an assistant message,
    ``tool_call_id`` on (and required by) a tool message."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCallSpec] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _shape(self) -> MessageSpec:
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only an assistant message carries tool_calls (got role "
                             f"{self.role!r})")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValueError("only a tool message carries tool_call_id")
        return self

    def message(self) -> dict[str, Any]:
        """The message as requests carry it (unset optional fields left out)."""
        found: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            found["tool_calls"] = [{"id": c.id or f"call_{i}", "name": c.name,
                                    "arguments": c.arguments}
                                   for i, c in enumerate(self.tool_calls, start=1)]
        if self.tool_call_id is not None:
            found["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            found["name"] = self.name
        return found


class MessagesChange(_CallChange):
    """One model call's request messages, replaced (the system prompt stays: ``prompt``
    changes it); the call runs live with them (label ``changed``)."""

    kind: Literal["messages"] = "messages"
    messages: list[MessageSpec] = Field(min_length=1)

    def describe(self) -> str:
        return f"messages of {self.call!r} ({len(self.messages)} message(s))"

    def request_messages(self) -> tuple[dict[str, Any], ...]:
        return tuple(m.message() for m in self.messages)


class AgentChange(_Change):
    """A change of one agent setting, scoped to the node, role or instance it names.

    ``agent_field`` is both the field of this change holding the new value and the
    :class:`~forklab.engine.graph.AgentSpec` field it sets."""

    promotable: ClassVar[bool] = True
    agent_field: ClassVar[str]
    target: str
    # SPEC §6.3: ``call`` in place of ``target`` applies the setting to that one model call
    # (the target is then the call's node, derived; the graph is not changed)
    call: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _target_of_call(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("call") is not None:
            address = parse_call_key(str(data["call"]))
            node = address.node if address else str(data["call"])
            key = cls.model_fields["target"].alias or "target"  # ``agent`` for tools
            given = data.get("target", data.get(key))
            # the model's own dump holds both (the target derived from the call): accepted
            if given is not None and given != node:
                raise ValueError("give 'call' (one model call) or 'target' (a node or role), "
                                 "not both")
            data = {k: v for k, v in data.items() if k not in ("target", key)}
            data[key] = node
        return data

    def model_post_init(self, __context: Any) -> None:
        if self.call is not None:
            _call_address(self.call, self.kind)

    def wire(self) -> dict[str, Any]:
        """One of ``call`` and ``target``: a per-call change's target is derived from its
        call (a form holding both, as a plain model dump does, still parses: the validator
        takes a target equal to the call's node)."""
        wired = super().wire()
        if self.call is not None:
            wired.pop("target", None)
            wired.pop(type(self).model_fields["target"].alias or "target", None)
        else:
            wired.pop("call", None)
        return wired

    def promotes(self) -> bool:
        return self.call is None

    def call_address(self) -> CallAddress | None:
        return None if self.call is None else _call_address(self.call, self.kind)

    def agent_update(self) -> dict[str, Any]:
        """The AgentSpec fields this change sets."""
        return {self.agent_field: getattr(self, self.agent_field)}

    def modified(self, agent: AgentSpec) -> AgentSpec:
        """``agent`` with this change's settings."""
        return agent.model_copy(update=self.agent_update())

    def scoped_node(self) -> str | None:
        return self.target.split(".")[0]

    def written_paths(self) -> list[Path]:
        """The agent attribute where the node config holds it; a role-wide change also
        writes every instance's, so it conflicts with an instance change. A per-call change
        writes that call's setting."""
        attribute = self.agent_field
        if self.call is not None:
            return [("call", str(_call_address(self.call, self.kind)), attribute)]
        match = TARGET.match(self.target)
        if match is None:  # refused later as an unreadable target; conflicts only with itself
            return [("agent-target", self.target, attribute)]
        node, role, index = match["node"], match["role"], match["i"]
        if role is None:
            return [("node", node, "agent", attribute)]
        base = ("node", node, "roles", role)
        if index is None:
            return [(*base, "agent", attribute), (*base, "instances", "*", attribute)]
        return [(*base, "instances", index, attribute)]


class ModelChange(AgentChange):
    """Swap the agent's model."""

    kind: Literal["model"] = "model"
    agent_field: ClassVar[str] = "model"
    model: str
    provider: str | None = None

    def agent_update(self) -> dict[str, Any]:
        return {"model": self.model, **({"provider": self.provider} if self.provider else {})}

    def describe(self) -> str:
        return f"model of {self.call or self.target!r} -> {self.model}"


class PromptChange(AgentChange):
    """Replace the agent's system prompt."""

    kind: Literal["prompt"] = "prompt"
    agent_field: ClassVar[str] = "system_prompt"
    system_prompt: str

    def describe(self) -> str:
        return f"prompt of {self.call or self.target!r}"


class TemperatureChange(AgentChange):
    """Resample the agent at another temperature."""

    kind: Literal["temperature"] = "temperature"
    agent_field: ClassVar[str] = "temperature"
    # allow_inf_nan: NaN fails both bounds silently ('should be <= 2' for nan), inf the upper
    temperature: float = Field(ge=0.0, le=2.0, allow_inf_nan=False)

    def describe(self) -> str:
        return f"temperature of {self.call or self.target!r} -> {self.temperature}"


class ToolsChange(AgentChange):
    """Change which tools an agent is offered (SPEC §6.3 ``tools``): ``agent`` names the
    node or role driving it, as ``target`` does for the other agent changes."""

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True,
                              populate_by_name=True)
    kind: Literal["tools"] = "tools"
    agent_field: ClassVar[str] = "tools"
    target: str = Field(alias="agent")
    add: list[str] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)
    tool_choice: Literal["auto", "required", "none"] | dict[str, str] | None = None

    def modified(self, agent: AgentSpec) -> AgentSpec:
        tools = [t for t in agent.tools or () if t not in self.remove]
        tools += [t for t in self.add if t not in tools]
        update: dict[str, Any] = {"tools": tools or None}
        if self.tool_choice is not None:
            update["tool_choice"] = self.tool_choice
        elif agent.tool_choice is not None and not tools:
            update["tool_choice"] = None  # nothing left to choose from
        return AgentSpec.model_validate({**agent.model_dump(), **update})

    def wire(self) -> dict[str, Any]:
        wired = _Change.wire(self)  # by alias: the target is ``agent``
        if self.call is not None:
            del wired["agent"]  # derived from the call: the wire form gives one of them
        else:
            wired.pop("call", None)
        return wired

    def describe(self) -> str:
        parts = [f"+{t}" for t in self.add] + [f"-{t}" for t in self.remove]
        if self.tool_choice is not None:
            parts.append(f"tool_choice={self.tool_choice}")
        return f"tools of {self.target!r} ({' '.join(parts)})"


class MemoryChange(_Change):
    kind: Literal["memory"] = "memory"
    set: dict[str, Any] = Field(default_factory=dict)
    delete: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        keys = [f"={k}" for k in self.set] + [f"-{k}" for k in self.delete]
        return f"memory {' '.join(keys)}"

    def written_paths(self) -> list[Path]:
        return [("memory", key) for key in [*self.set, *self.delete]]


class ConfigChange(_Change):
    promotable: ClassVar[bool] = True
    kind: Literal["config"] = "config"
    node: str
    patch: dict[str, Any]

    def describe(self) -> str:
        return f"config of {self.node!r} ({', '.join(self.patch)})"

    def scoped_node(self) -> str | None:
        return self.node

    def written_paths(self) -> list[Path]:
        """Every leaf of the merge patch (patching ``agent`` or a role conflicts with an
        agent change of that node or role)."""
        return leaves(("node", self.node), self.patch)


class RouteChange(_Change):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    kind: Literal["route"] = "route"
    source: str = Field(alias="from")
    to: str
    once: bool = False

    def describe(self) -> str:
        return f"route {self.source!r} -> {self.to!r}{' once' if self.once else ''}"

    def scoped_node(self) -> str | None:
        return self.source

    def written_paths(self) -> list[Path]:
        return [("route", self.source)]


class _NodeExecutionChange(_Change):
    """A change of what a node produces: every execution, or with ``occurrence`` one."""

    node: str
    occurrence: int | None = Field(default=None, ge=1)

    def scoped_node(self) -> str | None:
        return self.node

    def applies_to(self, node: str, occurrence: int) -> bool:
        return node == self.node and self.occurrence in (None, occurrence)

    def written_paths(self) -> list[Path]:
        """The whole node (or that execution): it substitutes what the node produces. The
        node-wide path is also written by each per-execution one, so they conflict."""
        if self.occurrence is None:
            return [("node", self.node)]
        return [("node", self.node), ("node", self.node, str(self.occurrence))]

    def wire(self) -> dict[str, Any]:
        wired = super().wire()
        if wired.get("occurrence") is None:
            wired.pop("occurrence", None)  # the form recorded before per-execution changes
        return wired

    def _of(self) -> str:
        return f"{self.node!r}" + ("" if self.occurrence is None else f" #{self.occurrence}")


class OutputChange(_NodeExecutionChange):
    kind: Literal["output"] = "output"
    memory: dict[str, Any]

    def describe(self) -> str:
        return f"output of {self._of()}"


class ToolChange(_NodeExecutionChange):
    kind: Literal["tool"] = "tool"
    result: Any

    def describe(self) -> str:
        return f"tool result of {self._of()}"


class HumanResponseChange(_Change):
    kind: Literal["human_response"] = "human_response"
    decision: Literal["approved", "rejected", "edited"]
    data: Any = None
    memory_updates: dict[str, Any] = Field(default_factory=dict)
    node: str | None = None  # with occurrence: the one gate execution this answers
    occurrence: int | None = Field(default=None, ge=1)
    call: str | None = None  # the gate of one tool call (``assist#1/turn:2/tool:1``)

    def model_post_init(self, __context: Any) -> None:
        if self.call is not None:
            _call_address(self.call, self.kind)

    def call_address(self) -> CallAddress | None:
        return None if self.call is None else _call_address(self.call, self.kind)

    def describe(self) -> str:
        where = "" if self.node is None else f" at {self.node!r}" + (
            "" if self.occurrence is None else f" #{self.occurrence}")
        return f"human response {self.decision}{where}"

    def applies_to(self, node: str, occurrence: int) -> bool:
        return (self.call is None and self.node in (None, node)
                and self.occurrence in (None, occurrence))

    def wire(self) -> dict[str, Any]:
        wired = super().wire()
        for key in ("node", "occurrence", "call"):
            if wired.get(key) is None:
                wired.pop(key, None)
        return wired

    def written_paths(self) -> list[Path]:
        address = self.call_address()
        return [("human",)] if address is None else [("human", str(address))]


class InputPatchChange(_Change):
    kind: Literal["input_patch"] = "input_patch"
    patch: dict[str, Any]

    def describe(self) -> str:
        return f"input patch ({', '.join(self.patch)})"

    def written_paths(self) -> list[Path]:
        """Down to the patch's leaves: two patches of different keys combine, a memory change
        and a patch of one key conflict."""
        return leaves(("memory",), self.patch)


Change = Annotated[
    ModelChange | PromptChange | TemperatureChange | MemoryChange | ConfigChange | RouteChange
    | OutputChange | ToolChange | HumanResponseChange | InputPatchChange | ReplyChange
    | ToolResultChange | RerunChange | ToolsChange | MessagesChange,
    Field(discriminator="kind"),
]
_ADAPTER: TypeAdapter[Change] = TypeAdapter(Change)
CHANGE_TYPES: tuple[type[_Change], ...] = get_args(get_args(Change)[0])
"""Every change kind's class, in the union's order."""
KINDS = tuple(str(cls.model_fields["kind"].default) for cls in CHANGE_TYPES)
CONFIG_KINDS = frozenset(k for k, cls in zip(KINDS, CHANGE_TYPES, strict=True) if cls.promotable)
"""Kinds that change the graph (promotable); the rest change state."""
AGENT_CHANGES: dict[str, type[AgentChange]] = {
    kind: cls for kind, cls in zip(KINDS, CHANGE_TYPES, strict=True)
    if issubclass(cls, AgentChange) and cls is not ToolsChange}
"""The agent-setting kinds whose value is one setting, by ``kind`` (the CLI's
``--KIND TARGET=VALUE`` flags are these; ``tools`` takes a JSON object: ``--tools``)."""


ChangeBase = _Change
"""What every change kind is (for code that takes any one of them)."""


def _build[C: _Change](cls: type[C], **fields: Any) -> C:
    """Validate a builder's fields; a bad value is an InvalidChange, like its wire form."""
    try:
        return cls.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(root)"
        kind = cls.model_fields["kind"].default
        raise InvalidChange(f"{kind} change, field '{field}': {err['msg']}", kind=kind,
                            field=field, reason=err["msg"]) from None


def _aimed(target: str) -> dict[str, str]:
    return {"call": target} if looks_like_call_key(target) else {"target": target}


class change:
    """Builders for the declarative change spec (SPEC §3.3); bad values raise InvalidChange."""

    # ``target`` may be a call key (``assist#1/turn:3``: it has ``/`` or ``:``): the change
    # then applies to that one model call (SPEC §6.3)

    @staticmethod
    def model(target: str, model: str, provider: str | None = None) -> ModelChange:
        return _build(ModelChange, **_aimed(target), model=model, provider=provider)

    @staticmethod
    def prompt(target: str, system_prompt: str) -> PromptChange:
        return _build(PromptChange, **_aimed(target), system_prompt=system_prompt)

    @staticmethod
    def temperature(target: str, t: float) -> TemperatureChange:
        return _build(TemperatureChange, **_aimed(target), temperature=t)

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
    def output(node: str, memory: dict[str, Any], occurrence: int | None = None) -> OutputChange:
        return _build(OutputChange, node=node, memory=memory, occurrence=occurrence)

    @staticmethod
    def tool(node: str, result: Any, occurrence: int | None = None) -> ToolChange:
        return _build(ToolChange, node=node, result=result, occurrence=occurrence)

    @staticmethod
    def human_response(decision: str, data: Any = None,
                       memory_updates: dict[str, Any] | None = None, *,
                       node: str | None = None, occurrence: int | None = None,
                       call: str | None = None) -> HumanResponseChange:
        return _build(HumanResponseChange, decision=decision, data=data,
                      memory_updates=memory_updates or {}, node=node, occurrence=occurrence,
                      call=call)

    @staticmethod
    def reply(call: str, text: str = "",
              tool_calls: list[dict[str, Any]] | None = None) -> ReplyChange:
        return _build(ReplyChange, call=call, text=text, tool_calls=tool_calls)

    @staticmethod
    def tool_result(call: str, result: Any) -> ToolResultChange:
        return _build(ToolResultChange, call=call, result=result)

    @staticmethod
    def rerun(call: str) -> RerunChange:
        return _build(RerunChange, call=call)

    @staticmethod
    def tools(agent: str, add: list[str] | None = None, remove: list[str] | None = None,
              tool_choice: Any = None) -> ToolsChange:
        return _build(ToolsChange, agent=agent, add=add or [], remove=remove or [],
                      tool_choice=tool_choice)

    @staticmethod
    def messages(call: str, messages: list[dict[str, Any]]) -> MessagesChange:
        return _build(MessagesChange, call=call, messages=messages)

    @staticmethod
    def input_patch(patch: dict[str, Any]) -> InputPatchChange:
        return _build(InputPatchChange, patch=patch)


# -- limits ------------------------------------------------------------------------------------


def _walk(value: Any, depth: int, counts: list[int], what: str = "change spec") -> None:
    if depth > MAX_DEPTH:
        raise InvalidOverrides(
            f"{what} is nested deeper than {MAX_DEPTH} levels; flatten it",
            limit="depth", max=MAX_DEPTH,
        )
    if isinstance(value, dict):
        counts[0] += len(value)
        for v in value.values():
            _walk(v, depth + 1, counts, what)
    elif isinstance(value, list):
        for v in value:
            _walk(v, depth + 1, counts, what)
    elif isinstance(value, str) and _is_placeholder(value):
        raise InvalidOverrides(
            f"{what} holds the redaction placeholder {value!r}; send the whole real "
            "value instead of a redacted one",
            limit="redaction",
        )


def _is_placeholder(text: str) -> bool:
    stripped = text.strip()
    if stripped in REDACTION_PLACEHOLDERS:
        return True
    head, sep, tail = stripped.partition("#")
    return head == "[REDACTED]" and bool(sep) and tail.isdigit()


def check_limits(spec: Any, what: str = "change spec") -> None:
    """Refuse specs over 64 KiB, 16 levels, 200 object keys, or holding a placeholder
    (``invalid_overrides``); ``what`` names the spec in the message."""
    size = len(json.dumps(spec, ensure_ascii=False).encode())
    if size > MAX_BYTES:
        raise InvalidOverrides(
            f"{what} is {size} bytes; the limit is {MAX_BYTES} (64 KiB)",
            limit="bytes", max=MAX_BYTES, found=size,
        )
    counts = [0]
    _walk(spec, 1, counts, what)
    if counts[0] > MAX_KEYS:
        raise InvalidOverrides(
            f"{what} has {counts[0]} object keys; the limit is {MAX_KEYS}",
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
        field = error_path(err["loc"][1:], data, err["type"]) or "(root)"
        raise InvalidChange(
            f"{data['kind']} change, field '{field}': {err['msg']}", kind=data["kind"],
            field=field,
        ) from None


def parse_changes(data: Any) -> list[Change]:
    """A list of changes (or one) from wire form, with the structural limits checked first.

    Built changes (already validated: a builder, a parsed request) pass through as they are;
    only their wire form is measured against the limits."""
    items = data if isinstance(data, (list, tuple)) else [data]
    wire = [c.wire() if isinstance(c, _Change) else c for c in items]
    check_limits(wire)
    return [c if isinstance(c, _Change) else parse_change(w)  # type: ignore[misc]
            for c, w in zip(items, wire, strict=True)]


def wire(changes: list[Change]) -> list[dict[str, Any]]:
    return [c.wire() for c in changes]
