"""Events: the facts a run is made of.

Every event is a frozen, keyword-only dataclass with a stable dotted ``type`` string that is
independent of the class path (renaming a class never breaks a stored log) and a ``SCHEMA``
number for upcasting old payloads. The envelope (``run_id``, ``seq``, ``at``, ``node``,
``occurrence``, ``iteration``) is shared; the rest is the payload.

Invariants:
- ``seq`` is 1-based and contiguous within a run (checked by stores on append and by
  :func:`forklab.engine.reducers.fold`);
- events are never mutated or deleted once appended (compaction of snapshotted runs aside);
- ``to_wire``/``from_wire`` round-trip exactly (canonically equal).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from forklab.engine.actions import Action, served_wire
from forklab.engine.actions import from_wire as action_from_wire
from forklab.engine.errors import EventGapError
from forklab.engine.status import CallKind, CallLabel, RunKind, RunStatus

if TYPE_CHECKING:
    from forklab.engine.state import RunState

REPLAY_VERSION = 2
"""Reducer semantics version. Bump when a reducer changes meaning; forks refuse skew.

2: fingerprints (the memo and side-effect key recorded in ``node.started``) cover occurrence,
iteration, absent reads and a subgraph's child graph; a failed call is a ``call.failed``
event; runs record taint across subgraph boundaries and forks their lineage."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    TYPE: ClassVar[str] = ""
    SCHEMA: ClassVar[int] = 1

    run_id: str
    seq: int
    at: float = 0.0
    node: str | None = None
    occurrence: int | None = None
    iteration: int | None = None

    @property
    def type(self) -> str:
        return self.TYPE

    def payload(self) -> dict[str, Any]:
        names = _PAYLOAD_FIELDS.get(type(self))
        if names is None:  # the payload's field names, in declaration order, once per class
            fields = _payload_fields(type(self))
            names = tuple(f.name for f in fields)
            _PAYLOAD_FIELDS[type(self)] = names
            _OMITTED_NONE[type(self)] = frozenset(
                f.name for f in fields if f.metadata.get("omit_none"))
        omitted = _OMITTED_NONE[type(self)]
        if not omitted:
            return {name: getattr(self, name) for name in names}
        return {name: getattr(self, name) for name in names
                if name not in omitted or getattr(self, name) is not None}

    def to_wire(self) -> dict[str, Any]:
        """JSON-ready form: the Event shape of SPEC §4.6 plus ``run_id`` and ``v``."""
        wire = self.untimed_wire()
        wire["at"] = datetime.fromtimestamp(self.at, UTC).isoformat()
        return wire

    def untimed_wire(self) -> dict[str, Any]:
        """:meth:`to_wire` without its last key, ``at`` (the ISO time)."""
        return {"run_id": self.run_id, "seq": self.seq, "type": self.TYPE,
                **self.stored_body()}

    def stored_body(self) -> dict[str, Any]:
        """:meth:`untimed_wire` without ``run_id``, ``seq`` and ``type``: the body a store
        keeps when its columns hold those and the exact float time (``SqliteStore``), so it
        neither formats nor stores nor parses a second copy of any of them."""
        return {
            "v": self.SCHEMA,
            "node": self.node,
            "occurrence": self.occurrence,
            "iteration": self.iteration,
            "payload": self.payload(),
        }


_ENVELOPE = frozenset({"run_id", "seq", "at", "node", "occurrence", "iteration"})
_PAYLOAD_FIELDS: dict[type, tuple[str, ...]] = {}
_OMITTED_NONE: dict[type, frozenset[str]] = {}
_OMIT_NONE = {"omit_none": True}
"""A field's metadata for one added after logs were stored: left out of the payload while
None (its default), so the events that never set it keep their stored form exactly."""
_NOT_WIRE = {"wire": False}
"""A field's metadata for what an event carries in memory only: not in its payload."""


def _payload_fields(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls)
            if f.name not in _ENVELOPE and f.metadata.get("wire", True)]


# -- run lifecycle ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted(Event):
    TYPE: ClassVar[str] = "run.started"
    graph_id: str
    graph_version: int
    graph_hash: str
    input: dict[str, Any]
    start: str
    run_kind: RunKind = RunKind.PRIMARY
    replay_version: int = REPLAY_VERSION
    label: str = ""
    parent_run_id: str | None = None
    tainted_input: list[str] = field(default_factory=list)  # a child run's tainted input keys


@dataclass(frozen=True, kw_only=True, slots=True)
class RunForked(Event):
    """Second event of a counterfactual run: the rebuilt prefix state it starts from."""

    TYPE: ClassVar[str] = "run.forked"
    base_run_id: str
    fork_sequence_id: int
    fork_node_id: str | None
    prefix_state: dict[str, Any]
    changes: list[dict[str, Any]]
    graph: dict[str, Any]
    fork_group_id: str | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    budget: dict[str, Any] = field(default_factory=dict)
    memoize: bool = False
    ignore_budget: bool = False
    estimate: dict[str, Any] = field(default_factory=dict)
    point: dict[str, Any] = field(default_factory=dict)
    # how many leading ``changes`` are the lineage's (the rest are this fork's own request)
    inherited_changes: int = 0
    # routers whose inherited once-only route change was already used before the point
    routes_used: list[str] = field(default_factory=list)
    # a call-level point (``assist#1/turn:3``) whose node's earlier calls the tail serves
    # from the log (None: a node point, or a call point an input patch moved to its node)
    prefix_call: str | None = None
    # {"run_id": R, "seq": S} when ``prefix_state`` is exactly run R's state at seq S (its
    # log folded to S); empty otherwise (a snapshot fork's rewound state). A durable store
    # may then keep the prefix by reference to R's log instead of a copy (SqliteStore).
    prefix_ref: dict[str, Any] = field(default_factory=dict)
    # SPEC §8 (a): the call key a one-call fork of an imported run re-asks; the fork ends
    # after that call (the trace's later calls are not re-executed). None: any other fork
    one_call: str | None = field(default=None, metadata=_OMIT_NONE)
    # The state ``prefix_state`` is the wire form of, when whoever made the event holds it
    # (a live fork's folded prefix): the reducer branches it instead of decoding the wire
    # form (see ``reducers._apply_fork``). In memory only: not in the payload, so never
    # stored, compared or shown; an event read back from a log has None.
    prefix: RunState | None = field(default=None, compare=False, repr=False,
                                    metadata=_NOT_WIRE)

    def prefix_names(self) -> tuple[object, object]:
        """``prefix_state``'s ``run_id`` and ``version``, read without making a deferred
        wire form (:data:`PREFIX_FROM_STATE`)."""
        if self.prefix is not None:
            return self.prefix.run_id, self.prefix.version
        return self.prefix_state.get("run_id"), self.prefix_state.get("version")


class _Deferred(dict[str, Any]):
    """The type of :data:`PREFIX_FROM_STATE` (only its one instance is ever made)."""


PREFIX_FROM_STATE: dict[str, Any] = _Deferred()
"""``RunForked(prefix_state=PREFIX_FROM_STATE, prefix=state)``: the event's
``prefix_state`` is ``state.to_wire()``, made on its first read (then kept), not when the
event is made. A live fork's prefix is a 1,000-execution state whose wire form took ~5 ms,
and a store keeping the prefix by reference (SqliteStore) never reads it. Sound because a
prefix state is read-only once folded (nothing edits a fork's prefix: the reducer branches
it; see ``fork.core.SharedPrefixes``), so the wire form made later is the one made now."""


class _PrefixWire:
    """``RunForked.prefix_state`` read through its slot: :data:`PREFIX_FROM_STATE` there
    reads as the wire form of the event's ``prefix``, made once and stored in the slot.
    Writes (``__init__``, the log decoder's builder) go to the slot unchanged."""

    __slots__ = ("slot",)

    def __init__(self, slot: Any) -> None:
        self.slot = slot

    def __get__(self, event: RunForked | None, owner: type | None = None) -> Any:
        if event is None:
            return self
        value = self.slot.__get__(event, owner)
        if value is PREFIX_FROM_STATE:
            if event.prefix is None:
                raise TypeError("run.forked: a deferred prefix_state needs the prefix state")
            value = event.prefix.to_wire()
            self.slot.__set__(event, value)  # frozen: the slot itself, as __init__ does
        return value

    def __set__(self, event: RunForked, value: dict[str, Any]) -> None:
        self.slot.__set__(event, value)


setattr(RunForked, "prefix_state", _PrefixWire(RunForked.__dict__["prefix_state"]))  # noqa: B010


@dataclass(frozen=True, kw_only=True, slots=True)
class ChangeApplied(Event):
    """A change of a fork applied to the state before the tail (memory, route, …)."""

    TYPE: ClassVar[str] = "change.applied"
    change: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunCompleted(Event):
    TYPE: ClassVar[str] = "run.completed"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunFailed(Event):
    TYPE: ClassVar[str] = "run.failed"
    error: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunBlocked(Event):
    TYPE: ClassVar[str] = "run.blocked"
    suppressed_effects: list[dict[str, Any]]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunCancelled(Event):
    TYPE: ClassVar[str] = "run.cancelled"
    reason: str = ""


# -- node lifecycle --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeStarted(Event):
    TYPE: ClassVar[str] = "node.started"
    kind: str
    fingerprint: str
    reads: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeCompleted(Event):
    TYPE: ClassVar[str] = "node.completed"
    next: list[str]
    waiting: list[str] = field(default_factory=list)
    duration_ms: float = 0.0
    memo: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeReused(Event):
    """A node of a fork tail served whole from the base's recording (a memo hit), in one
    event: what ``node.started``, the re-emitted action events, ``memory.written`` and
    ``node.completed`` of the same execution carried
    (docs/forking.md#served-nodes-one-nodereused-event).

    ``actions`` are the execution's action records as served (labelled ``reused``), each
    with the event's seq; the fold makes them the execution's own, shared, not copied. On
    the wire they are listed without ``seq`` (:func:`~forklab.engine.actions.served_wire`).
    ``tainted`` names the written keys that are tainted; ``next``/``waiting`` are the
    planner's answer, as in ``node.completed``. Folds to exactly the state of the
    multi-event form, seq numbers aside."""

    TYPE: ClassVar[str] = "node.reused"
    kind: str
    fingerprint: str
    reads: dict[str, Any]
    actions: tuple[Action, ...]
    writes: dict[str, Any]
    deletes: list[str]
    tainted: list[str]
    next: list[str]
    waiting: list[str] = field(default_factory=list)

    def payload(self) -> dict[str, Any]:
        # Event.payload's fields written out in declaration order (one per served node of
        # a fork tail, at its store); tests compare it with the general form
        return {"kind": self.kind, "fingerprint": self.fingerprint, "reads": self.reads,
                "actions": [served_wire(record) for record in self.actions],
                "writes": self.writes, "deletes": self.deletes, "tainted": self.tainted,
                "next": self.next, "waiting": self.waiting}


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeFailed(Event):
    TYPE: ClassVar[str] = "node.failed"
    error: dict[str, Any]
    duration_ms: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeInterrupted(Event):
    """The process died inside this node; its buffered writes are discarded on resume."""

    TYPE: ClassVar[str] = "node.interrupted"
    reason: str


# -- actions ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentRequested(Event):
    TYPE: ClassVar[str] = "agent.requested"
    role: str | None
    index: int | None
    provider: str
    model: str
    system_prompt: str
    temperature: float
    messages: list[dict[str, Any]]
    params: dict[str, Any]
    request_hash: str
    # SPEC §6: the call key and what a tool-using agent was offered (None: not offered)
    call: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    # request fields not sent, so the vendor's default applied (``temperature``,
    # ``max_tokens`` of a call imported from a trace that did not say them); None: all sent
    unsent: list[str] | None = field(default=None, metadata=_OMIT_NONE)


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentResponded(Event):
    TYPE: ClassVar[str] = "agent.responded"
    role: str | None
    index: int | None
    model: str
    text: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    latency_ms: float
    label: CallLabel
    request_hash: str
    call: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # {id, name, arguments}: never dropped
    finish_reason: str | None = None
    attempts: list[dict[str, Any]] | None = None  # each HTTP attempt (retries), when made


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCalled(Event):
    TYPE: ClassVar[str] = "tool.called"
    tool: str
    effect: str
    args: dict[str, Any]
    args_hash: str
    call: str | None = None  # ``turn:2/tool:1``: a tool the model chose (None: a tool node)
    call_id: str | None = None  # the provider's id for that tool call
    trusted: bool | None = None  # a workflow's @forklab.tool: its ``trusted`` (None: others)


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolReturned(Event):
    TYPE: ClassVar[str] = "tool.returned"
    result: Any
    label: CallLabel
    latency_ms: float = 0.0
    call: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CallFailed(Event):
    """A model or tool call that raised (provider error, tool exception): still a call,
    listed in ``calls`` and counted against a fork's budget. ``request_hash`` is the model
    request's hash or the tool's args hash."""

    TYPE: ClassVar[str] = "call.failed"
    kind: CallKind  # agent | tool
    role: str | None
    index: int | None
    model: str | None
    label: CallLabel
    error: dict[str, Any]
    request_hash: str
    call: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class HumanRequested(Event):
    TYPE: ClassVar[str] = "human.requested"
    prompt: str
    context: dict[str, Any]
    call: str | None = None  # a tool call's gate: the key of the call waiting for it


@dataclass(frozen=True, kw_only=True, slots=True)
class HumanAnswered(Event):
    TYPE: ClassVar[str] = "human.answered"
    decision: str
    data: Any = None
    memory_updates: dict[str, Any] = field(default_factory=dict)
    label: CallLabel = "live"
    answered_by: str = ""
    call: str | None = None  # a tool call's gate (``turn:1/tool:2``, SPEC §6.3): its key


@dataclass(frozen=True, kw_only=True, slots=True)
class RouteDecided(Event):
    TYPE: ClassVar[str] = "route.decided"
    to: str
    reason: str
    label: CallLabel = "live"


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryWritten(Event):
    TYPE: ClassVar[str] = "memory.written"
    key: str
    value: Any
    tainted: bool = False
    deleted: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class EffectSuppressed(Event):
    TYPE: ClassVar[str] = "effect.suppressed"
    inputs: dict[str, Any]
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class SubgraphStarted(Event):
    TYPE: ClassVar[str] = "subgraph.started"
    child_run_id: str
    graph_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class SubgraphCompleted(Event):
    TYPE: ClassVar[str] = "subgraph.completed"
    child_run_id: str
    status: RunStatus
    output: dict[str, Any]
    label: CallLabel = "live"
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    tainted: list[str] = field(default_factory=list)  # child keys tainted at its end


@dataclass(frozen=True, kw_only=True, slots=True)
class ReflectionDiscarded(Event):
    """A write to a cross-run store attempted inside a fork; captured, never applied."""

    TYPE: ClassVar[str] = "reflection.discarded"
    store: str
    key: str
    value: Any


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceImported(Event):
    """Second event of a run imported from an OpenTelemetry trace (SPEC §8): the trace it
    came from, how many spans it had, each call's import info (``{call, kind, span_id,
    replayable, missing, capture_hint?}``: inspect-only calls say what was not captured and
    how to turn capture on), the spans that could not be mapped, with reasons, and the
    conversation the trace belongs to when a span names one."""

    TYPE: ClassVar[str] = "trace.imported"
    trace_id: str
    spans: int
    calls: list[dict[str, Any]]
    rejected: list[dict[str, Any]] = field(default_factory=list)
    # gen_ai.conversation.id / OpenInference session.id: runs of one conversation
    conversation: str | None = None


AnyEvent = (
    RunStarted | RunForked | ChangeApplied | RunCompleted | RunFailed | RunBlocked
    | RunCancelled | NodeStarted | NodeCompleted | NodeReused | NodeFailed | NodeInterrupted
    | AgentRequested | AgentResponded | ToolCalled | ToolReturned | CallFailed
    | HumanRequested | HumanAnswered | RouteDecided | MemoryWritten | EffectSuppressed
    | SubgraphStarted | SubgraphCompleted | ReflectionDiscarded | TraceImported
)

EVENT_TYPES: dict[str, type[Event]] = {
    cls.TYPE: cls
    for cls in (
        RunStarted, RunForked, ChangeApplied, RunCompleted, RunFailed, RunBlocked,
        RunCancelled, NodeStarted, NodeCompleted, NodeReused, NodeFailed, NodeInterrupted,
        AgentRequested, AgentResponded, ToolCalled, ToolReturned, CallFailed,
        HumanRequested, HumanAnswered, RouteDecided, MemoryWritten, EffectSuppressed,
        SubgraphStarted, SubgraphCompleted, ReflectionDiscarded, TraceImported,
    )
}
TERMINAL_TYPES = frozenset(
    {RunCompleted.TYPE, RunFailed.TYPE, RunBlocked.TYPE, RunCancelled.TYPE}
)


def _parse_at(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value)).timestamp()


def upcast(type_: str, version: int, payload: dict[str, Any]) -> dict[str, Any]:
    """Bring an old payload up to the current schema of its type (no upcasters yet: v1)."""
    return payload


def from_wire(data: dict[str, Any], *, run_id: str | None = None,
              owned: bool = False) -> AnyEvent:
    """Rebuild an event from its wire form; an unknown type raises EventGapError.

    ``owned=True``: ``data`` is the caller's to give away (freshly decoded JSON), so its
    payload dict is used without a copy."""
    type_ = data["type"]
    cls = EVENT_TYPES.get(type_)
    if cls is None:
        raise EventGapError(f"unknown event type {type_!r} at seq {data.get('seq')}")
    payload = data.get("payload") or {}
    if not owned:
        payload = dict(payload)
    version = data.get("v", 1)
    if version != cls.SCHEMA:  # a payload written at the class's schema needs no upcast
        payload = upcast(type_, int(version), payload)
    seq = int(data["seq"])
    if cls is NodeReused and "actions" in payload:  # listed without seq: each takes the event's
        payload["actions"] = tuple(action_from_wire(a, seq=seq) for a in payload["actions"] or ())
    event = (_BUILDERS.get(cls) or _builder(cls)).build(data, run_id, seq, payload)
    if event is None:
        # a payload with a key the class lacks or without a required one: the dataclass's
        # own __init__ raises its TypeError, as it always did
        at = data.get("at", 0.0)
        envelope: tuple[Any, ...] = (
            run_id or data["run_id"], seq, at if type(at) is float else _parse_at(at),
            data.get("node"), data.get("occurrence"), data.get("iteration"))
        event = cls(**dict(zip(_ENVELOPE_ORDER, envelope, strict=True)), **payload)
    return event  # type: ignore[return-value]


def from_stored(type_: str, run_id: str, seq: int, at: float,
                body: dict[str, Any]) -> AnyEvent:
    """An event from a store's row: its ``type`` and ``seq`` columns, its exact float time
    and its decoded :meth:`Event.stored_body` (the caller's to give away). The same event
    as :func:`from_wire` of the body with the columns put back, built without writing them
    into it and reading them out again, nor looking its class up twice (a log read builds
    every event of a run this way; ~10% of building them). Whatever that path treats
    specially — an unknown type, a payload of another schema, a served node's records, a
    payload the class refuses — goes to :func:`from_wire`."""
    cls = EVENT_TYPES.get(type_)
    if cls is not None and cls is not NodeReused and body.get("v", 1) == cls.SCHEMA:
        body["at"] = at
        event = (_BUILDERS.get(cls) or _builder(cls)).build(body, run_id, seq,
                                                             body.get("payload") or {})
        if event is not None:
            return event  # type: ignore[return-value]
    body["seq"], body["type"], body["at"] = seq, type_, at
    return from_wire(body, run_id=run_id, owned=True)


_ENVELOPE_ORDER = ("run_id", "seq", "at", "node", "occurrence", "iteration")
_SET_RUN_ID, _SET_SEQ, _SET_AT, _SET_NODE, _SET_OCCURRENCE, _SET_ITERATION = (
    getattr(Event, name).__set__ for name in _ENVELOPE_ORDER)
"""The envelope's slots, declared by :class:`Event` and shared by every event class."""
_ABSENT = object()


class _Builder:
    """Builds one event class's instances from a wire dict without its ``__init__``.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` from
    keyword arguments; a store read rebuilds every event of a log (5,000 for a 1,000-node
    chain), and that call was half of decoding one. This sets the same slots through their
    descriptors, a field the payload lacks taking its declared default (or a fresh
    ``default_factory`` value) — the same object ``__init__`` makes, field for field (tests
    compare them for every event type; no event class has ``__post_init__``). The envelope
    is read from the wire dict straight into its slots and each payload field is looked up
    once (an envelope tuple and a second lookup per field were 15 to 20% of building a log's
    events; a function written out per class, as :mod:`dataclasses` writes ``__init__``,
    was no faster once its compiling in a fresh process was counted).
    """

    __slots__ = ("cls", "fields", "named", "unset")

    def __init__(self, cls: type[Event]) -> None:
        self.cls = cls
        self.fields = tuple(
            (getattr(cls, f.name).__set__, f.name, f.default,
             None if f.default_factory is dataclasses.MISSING else f.default_factory)
            for f in _payload_fields(cls))
        self.named = tuple((set_slot, name) for set_slot, name, _, _ in self.fields)
        # in-memory-only fields (``_NOT_WIRE``) take their default: a log never sets them
        self.unset = tuple((getattr(cls, f.name).__set__, f.default)
                           for f in dataclasses.fields(cls)
                           if f.name not in _ENVELOPE and not f.metadata.get("wire", True))

    def build(self, data: dict[str, Any], run_id: str | None, seq: int,
              payload: dict[str, Any]) -> Event | None:
        """The event, or None when ``payload`` has a key that is no payload field of the
        class or lacks a required one (what ``__init__`` refuses)."""
        event = object.__new__(self.cls)
        _SET_RUN_ID(event, run_id or data["run_id"])
        _SET_SEQ(event, seq)
        at = data.get("at", 0.0)
        _SET_AT(event, at if type(at) is float else _parse_at(at))
        _SET_NODE(event, data.get("node"))
        _SET_OCCURRENCE(event, data.get("occurrence"))
        _SET_ITERATION(event, data.get("iteration"))
        for set_slot, value in self.unset:
            set_slot(event, value)
        if len(payload) == len(self.named):
            # what a store writes: every payload field, nothing else (as many keys as
            # fields, each field found: the same names). A key the class lacks standing in
            # for one it has raises KeyError, and the general loop below decides.
            try:
                for set_slot, name in self.named:
                    set_slot(event, payload[name])
                return event
            except KeyError:
                pass
        found = 0
        for set_slot, name, default, factory in self.fields:
            value = payload.get(name, _ABSENT)
            if value is not _ABSENT:
                set_slot(event, value)
                found += 1
            elif factory is not None:
                set_slot(event, factory())
            elif default is not dataclasses.MISSING:
                set_slot(event, default)
            else:
                return None
        return event if found == len(payload) else None


def node_reused(run_id: str, seq: int, at: float, node: str, occurrence: int, iteration: int,
                *, kind: str, fingerprint: str, reads: dict[str, Any],
                actions: tuple[Action, ...], writes: dict[str, Any], deletes: list[str],
                tainted: list[str], next: list[str], waiting: list[str]) -> NodeReused:
    """``NodeReused(...)`` of these fields, built without its ``__init__``: a fork tail
    builds one per served node, and the frozen ``__init__`` (``object.__setattr__`` per
    field, 15 of them) was half of it. Every field is given and set in a straight line
    through its slot, so this is the object ``__init__`` makes, field for field (tests
    compare them)."""
    (set_run_id, set_seq, set_at, set_node, set_occurrence, set_iteration, set_kind,
     set_fingerprint, set_reads, set_actions, set_writes, set_deletes, set_tainted, set_next,
     set_waiting) = _REUSED_SLOTS
    event = object.__new__(NodeReused)
    set_run_id(event, run_id)
    set_seq(event, seq)
    set_at(event, at)
    set_node(event, node)
    set_occurrence(event, occurrence)
    set_iteration(event, iteration)
    set_kind(event, kind)
    set_fingerprint(event, fingerprint)
    set_reads(event, reads)
    set_actions(event, actions)
    set_writes(event, writes)
    set_deletes(event, deletes)
    set_tainted(event, tainted)
    set_next(event, next)
    set_waiting(event, waiting)
    return event


_REUSED_ORDER = (*_ENVELOPE_ORDER, "kind", "fingerprint", "reads", "actions", "writes",
                 "deletes", "tainted", "next", "waiting")
if sorted(_REUSED_ORDER) != sorted(f.name for f in dataclasses.fields(NodeReused)):
    raise AssertionError("node_reused must set every field of NodeReused")  # pragma: no cover
_REUSED_SLOTS = tuple(getattr(NodeReused, name).__set__ for name in _REUSED_ORDER)


_BUILDERS: dict[type[Event], _Builder] = {}


def _builder(cls: type[Event]) -> _Builder:
    found = _BUILDERS[cls] = _Builder(cls)  # idempotent: two threads build equal ones
    return found

