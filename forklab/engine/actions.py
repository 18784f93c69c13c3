"""Action records: what a node execution did, one typed record per action event folded.

The reducers build them (``Execution.actions``), readers match on their classes (``match`` /
``isinstance``; mypy checks a ``match`` over :data:`Action` ending in ``assert_never`` for
exhaustiveness). A record is frozen and never changed after it is built, so one record may
be shared: a served node's records (``node.reused``) are the same objects in the event and
in the folded state.

**Wire form.** ``{"type": TYPE, "seq": seq, <fields in declaration order>}`` — exactly the
dicts the folded state held before records were typed, so state snapshots, a fork's
``run.forked`` prefix and canonical state comparisons are unchanged. :func:`to_wire` and
:func:`from_wire` are the one conversion; ``node.reused`` payloads carry the same form
without ``seq`` (:func:`served_wire`). Fields that hold JSON values (``args``, ``error``,
``data``, ``output``, …) hold them as decoded; like the records, they are never mutated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from forklab.engine.calls import turn_call
from forklab.engine.status import CallKind, CallLabel, RunStatus


class _Record:
    """What every record shares: immutability, so copying a state shares its records."""

    __slots__ = ()

    def __copy__(self) -> _Record:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _Record:
        return self


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentAsked(_Record):
    """``agent.requested``: a model call was requested."""

    TYPE: ClassVar[Literal["agent"]] = "agent"
    seq: int
    request_hash: str
    role: str | None
    index: int | None
    call: str | None = None  # the call key within its execution (``turn:2``), SPEC §6.2


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentAnswer(_Record):
    """``agent.responded``: a model call's answer."""

    TYPE: ClassVar[Literal["agent_result"]] = "agent_result"
    seq: int
    request_hash: str
    text: str
    role: str | None
    index: int | None
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    latency_ms: float
    label: CallLabel
    call: str | None = None
    tool_calls: tuple[dict[str, Any], ...] | None = None  # {id, name, arguments} asked for
    finish_reason: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall(_Record):
    """``tool.called``: what a tool was called with."""

    TYPE: ClassVar[Literal["tool"]] = "tool"
    seq: int
    args_hash: str
    args: dict[str, Any]
    tool: str
    call: str | None = None  # ``turn:2/tool:1`` for a tool the model chose; None: a tool node
    call_id: str | None = None  # the provider's id of the tool call (an alias of the key)
    # a workflow's ``@forklab.tool`` declares these in code, where no graph holds them (a
    # graph's tools' effects are in its graph): kept for a fork's estimate; None otherwise,
    # and then absent from the wire form, so records without them read as they always did
    effect: str | None = None
    trusted: bool | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResult(_Record):
    """``tool.returned``: a tool's result."""

    TYPE: ClassVar[Literal["tool_result"]] = "tool_result"
    seq: int
    result: Any
    label: CallLabel
    call: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CallFailure(_Record):
    """``call.failed``: a model or tool call failed (``kind`` says which)."""

    TYPE: ClassVar[Literal["call_failed"]] = "call_failed"
    seq: int
    kind: CallKind
    role: str | None
    index: int | None
    model: str | None
    label: CallLabel
    error: dict[str, Any]
    request_hash: str | None
    call: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RouteTaken(_Record):
    """``route.decided``: where a router (or a served node) sends the run."""

    TYPE: ClassVar[Literal["route"]] = "route"
    seq: int
    to: str
    reason: str
    label: CallLabel


@dataclass(frozen=True, kw_only=True, slots=True)
class HumanDecision(_Record):
    """``human.answered``: an approval gate's answer."""

    TYPE: ClassVar[Literal["human"]] = "human"
    seq: int
    decision: str
    data: Any
    memory_updates: dict[str, Any]
    label: CallLabel
    call: str | None = None  # the tool call a per-call gate answered


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildStarted(_Record):
    """``subgraph.started``: a subgraph node started its child run."""

    TYPE: ClassVar[Literal["subgraph"]] = "subgraph"
    seq: int
    child_run_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildOutcome(_Record):
    """``subgraph.completed``: a child run's result (counted as one call of the parent).

    The defaults read records stored before the totals and taint were recorded."""

    TYPE: ClassVar[Literal["subgraph_result"]] = "subgraph_result"
    seq: int
    child_run_id: str
    status: RunStatus
    output: dict[str, Any]
    label: CallLabel
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    tainted: tuple[str, ...] = ()


Action = (AgentAsked | AgentAnswer | ToolCall | ToolResult | CallFailure | RouteTaken
          | HumanDecision | ChildStarted | ChildOutcome)
"""Every action record; a new kind is a class here and a branch in each exhaustive match."""

ACTION_TYPES: dict[str, type[Action]] = {cls.TYPE: cls for cls in (
    AgentAsked, AgentAnswer, ToolCall, ToolResult, CallFailure, RouteTaken, HumanDecision,
    ChildStarted, ChildOutcome,
)}

CallRecord = AgentAnswer | ToolResult | CallFailure | HumanDecision | ChildOutcome
"""The records that are calls: labelled, each listed once in the run's ``calls``."""

_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls) if f.name != "seq")
    for cls in ACTION_TYPES.values()
}


_SLOTS: dict[type, tuple[tuple[str, Any, Any], ...]] = {
    cls: tuple((f.name, getattr(cls, f.name).__get__, getattr(cls, f.name).__set__)
               for f in dataclasses.fields(cls))
    for cls in ACTION_TYPES.values()
}
"""Each record class's fields as (name, slot getter, slot setter), in declaration order."""
_NAMES = {cls: frozenset(name for name, _, _ in slots) for cls, slots in _SLOTS.items()}

def replaced[R: _Record](record: R, **changes: Any) -> R:
    """``dataclasses.replace(record, **changes)`` without the frozen ``__init__``
    (``object.__setattr__`` per field): each slot set through its descriptor, from
    ``changes`` or from ``record``. No record class has ``__post_init__`` or a field
    ``init`` leaves out, so this is the record ``replace`` makes, field for field (tests
    compare them); a change naming no field of the record raises TypeError, as there. A
    fork tail serves each of its calls' records this way (``memoized.reused_actions``)."""
    cls = type(record)
    if not changes.keys() <= _NAMES[cls]:
        raise TypeError(f"{cls.__name__} has no field among {sorted(changes)}")
    new = object.__new__(cls)
    for name, get, set_slot in _SLOTS[cls]:
        set_slot(new, changes[name] if name in changes else get(record))
    return new


def _setters(cls: type[AgentAsked | AgentAnswer], order: list[str]) -> tuple[Any, ...]:
    """The slot setters of ``cls``'s fields, checked to be ``order`` (what a builder below
    writes out)."""
    if [f.name for f in dataclasses.fields(cls)] != order:  # pragma: no cover
        raise AssertionError(f"a builder must set every field of {cls.__name__}, in order")
    return tuple(getattr(cls, name).__set__ for name in order)


_ASKED_SETTERS = _setters(AgentAsked, ["seq", "request_hash", "role", "index", "call"])
_ANSWER_SETTERS = _setters(AgentAnswer, [
    "seq", "request_hash", "text", "role", "index", "model", "input_tokens",
    "output_tokens", "cost_usd", "latency_ms", "label", "call", "tool_calls",
    "finish_reason"])


def asked(seq: int, request_hash: str, role: str | None, index: int | None,
          call: str | None = None) -> AgentAsked:
    """``AgentAsked(...)`` of these fields, each slot set in a straight line: the frozen
    ``__init__`` (``object.__setattr__`` per field) was twice the cost, and the fold makes
    one per model call of a log. The same record (tests compare them)."""
    set_seq, set_hash, set_role, set_index, set_call = _ASKED_SETTERS
    new = object.__new__(AgentAsked)
    set_seq(new, seq)
    set_hash(new, request_hash)
    set_role(new, role)
    set_index(new, index)
    set_call(new, call)
    return new


def answered(seq: int, request_hash: str, text: str, role: str | None, index: int | None,
             model: str, input_tokens: int, output_tokens: int, cost_usd: float | None,
             latency_ms: float, label: CallLabel, call: str | None = None,
             tool_calls: tuple[dict[str, Any], ...] | None = None,
             finish_reason: str | None = None) -> AgentAnswer:
    """``AgentAnswer(...)`` of these fields, each slot set in a straight line (a third of
    the frozen ``__init__``'s cost): the fold makes one per model call of a log, a fork
    tail one per served agent node (:func:`served_answer`). The same record (tests compare
    them)."""
    (set_seq, set_hash, set_text, set_role, set_index, set_model, set_in, set_out, set_cost,
     set_latency, set_label, set_call, set_tool_calls, set_finish) = _ANSWER_SETTERS
    new = object.__new__(AgentAnswer)
    set_seq(new, seq)
    set_hash(new, request_hash)
    set_text(new, text)
    set_role(new, role)
    set_index(new, index)
    set_model(new, model)
    set_in(new, input_tokens)
    set_out(new, output_tokens)
    set_cost(new, cost_usd)
    set_latency(new, latency_ms)
    set_label(new, label)
    set_call(new, call)
    set_tool_calls(new, tool_calls)
    set_finish(new, finish_reason)
    return new


def served_answer(a: AgentAnswer, seq: int) -> AgentAnswer:
    """``replaced(a, seq=seq, latency_ms=0.0, label="reused")`` — how a fork tail serves a
    recorded answer — through :func:`answered` (the most frequent served record: one per
    served agent node; the general loop was half of serving one)."""
    return answered(seq, a.request_hash, a.text, a.role, a.index, a.model, a.input_tokens,
                    a.output_tokens, a.cost_usd, 0.0, "reused", a.call, a.tool_calls,
                    a.finish_reason)


def call_of(record: AgentAsked | AgentAnswer | CallFailure | ToolCall | ToolResult,
            ) -> str | None:
    """The call key part of ``record`` (SPEC §6.2). A model call recorded without one — a
    log written before keys, or a one-turn agent node, which records none so that its
    events read as they always did — is its role instance's first turn."""
    if record.call is not None:
        return record.call
    if isinstance(record, (AgentAsked, AgentAnswer)) or (
            isinstance(record, CallFailure) and record.kind == "agent"):
        return turn_call(1, record.role, record.index)
    return None


def call_records(actions: Iterable[Action], call: str) -> list[Action]:
    """The records of one call (its request, its answer, result or failure) among an
    execution's ``actions``, in recorded order."""
    return [a for a in actions
            if isinstance(a, (AgentAsked, AgentAnswer, ToolCall, ToolResult, CallFailure))
            and call_of(a) == call]


def served_wire(record: Action) -> dict[str, Any]:
    """``record``'s wire form without ``seq`` (how a ``node.reused`` payload lists it); an
    answer's written out key by key in declaration order (the same dict: tests compare)."""
    if type(record) is AgentAnswer:
        return {"type": "agent_result", "request_hash": record.request_hash,
                "text": record.text, "role": record.role, "index": record.index,
                "model": record.model, "input_tokens": record.input_tokens,
                "output_tokens": record.output_tokens, "cost_usd": record.cost_usd,
                "latency_ms": record.latency_ms, "label": record.label, "call": record.call,
                "tool_calls": record.tool_calls, "finish_reason": record.finish_reason}
    return _with_fields({"type": record.TYPE}, record)


def to_wire(record: Action) -> dict[str, Any]:
    """``record``'s wire form (the module's docstring): ``type``, ``seq``, its fields."""
    return _with_fields({"type": record.TYPE, "seq": record.seq}, record)


_ABSENT_WHEN_NONE = frozenset({"effect", "trusted"})
"""Fields added after records were first written: left out of the wire form while unset."""


def _with_fields(wire: dict[str, Any], record: Action) -> dict[str, Any]:
    for name in _FIELDS[type(record)]:
        value = getattr(record, name)
        if value is None and name in _ABSENT_WHEN_NONE:
            continue
        wire[name] = value
    if isinstance(record, ChildOutcome):  # a list on the wire, as the event has it
        wire["tainted"] = list(record.tainted)
    return wire


def from_wire(data: dict[str, Any], *, seq: int | None = None) -> Action:
    """The record ``data`` (a wire form) describes; ``seq`` gives one to a form without it
    (a ``node.reused`` payload's). An unknown type or a missing field raises ValueError."""
    cls = ACTION_TYPES.get(data.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown action record type {data.get('type')!r}; expected one "
                         f"of {sorted(ACTION_TYPES)}")
    fields = {k: v for k, v in data.items() if k != "type"}
    if seq is not None:
        fields["seq"] = seq
    if cls is ChildOutcome:
        fields["tainted"] = tuple(fields.get("tainted") or ())
    elif cls is AgentAnswer and fields.get("tool_calls") is not None:
        fields["tool_calls"] = tuple(fields["tool_calls"])
    try:
        return cls(**fields)
    except TypeError as exc:
        raise ValueError(f"malformed {cls.TYPE!r} action record: {exc}") from None


__all__ = [
    "ACTION_TYPES", "Action", "AgentAnswer", "AgentAsked", "CallFailure", "CallRecord",
    "ChildOutcome", "ChildStarted", "HumanDecision", "RouteTaken", "ToolCall", "ToolResult",
    "answered", "asked", "call_of", "call_records", "from_wire", "served_answer", "served_wire", "to_wire",
]
