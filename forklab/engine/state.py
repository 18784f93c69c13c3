"""Run state: what folding a run's events produces.

The state is a plain mutable object owned by whoever folds (the fold, the live runner); it is
changed only by :func:`forklab.engine.reducers.evolve`. ``to_wire`` / ``from_wire`` give the
JSON form used for snapshots, the ``run.forked`` prefix and state comparison
(``canonical_equals(a.to_wire(), b.to_wire())``).

Writes made inside a node are buffered in ``pending_*`` and committed only at
``node.completed``, so every node-start boundary holds a state the run really had, and a node
interrupted by a crash leaves no half-applied writes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import orjson

from forklab.engine import actions as action_records
from forklab.engine.actions import Action
from forklab.engine.canonical import loads
from forklab.engine.status import (
    ACTIVE_STATUSES,
    FINISHED_STATUSES,
    CallKind,
    CallLabel,
    ExecutionStatus,
    RunKind,
    RunStatus,
)

__all__ = ["ACTIVE_STATUSES", "FINISHED_STATUSES"]  # re-exported for the state's readers


def _private(data: Any) -> Any:
    """A private copy of JSON data: what a JSON round trip through the json module returns
    (several times faster than deepcopy), made by orjson when that is provably the same.

    orjson writes JSON ~8x faster, and reading back what it wrote gives what the json
    module's round trip gives, except that it writes NaN and infinities as ``null``. It
    refuses (TypeError) what the json module would write differently or refuse too —
    integers wider than 64 bits, non-string keys, sets, lone surrogates, dataclasses and
    datetimes (passed through to be refused) — and those take the json module's round trip.
    The copy is compared with the original: a NaN or an infinity turned ``null`` makes them
    differ, as does whatever orjson wrote that the json module would have refused (a plain
    ``Enum``, a UUID: neither equals its JSON value), and those take the json module's
    round trip as well, which copies the NaN and raises on the rest, as it always did."""
    try:
        copied = orjson.loads(orjson.dumps(data, option=_REFUSED_BY_JSON))
    except TypeError:
        return loads(json.dumps(data))
    return copied if copied == data else loads(json.dumps(data))


_REFUSED_BY_JSON = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


class NodesSoFar(Sequence[str]):
    """The first ``n`` items of a list that is only ever appended to, without copying them.

    Every execution keeps its iteration's node list as it was when the node started (to
    restore it if the node is interrupted); a copy each was quadratic in a long iteration — a
    10,000-node chain held 50 million copied ids. Sound because the reducers only ever append
    to ``RunState.iteration_nodes`` and replace it (never edit it in place). Compares equal
    to a list with the same items; serialises as a list (``Execution.to_wire``).
    """

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[str]) -> None:
        self._items = items
        self._n = len(items)

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        return self._items[:self._n][index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items[:self._n])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, NodesSoFar)):
            return len(other) == self._n and list(other) == self._items[:self._n]
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self._items[:self._n])


@dataclass(slots=True)
class Call:
    """One model, tool or human call with its provenance label."""

    seq: int
    node: str
    occurrence: int
    kind: CallKind
    label: CallLabel
    role: str | None = None
    index: int | None = None
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    call: str | None = None  # the call key (``assist#1/turn:2``) of a call inside a loop

    def to_wire(self) -> dict[str, Any]:
        role = self.role if self.index is None else f"{self.role}[{self.index}]"
        return {
            "seq": self.seq, "node": self.node, "occurrence": self.occurrence,
            "role": role, "kind": self.kind, "label": self.label, "model": self.model,
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd, "call": self.call,
        }


@dataclass(slots=True)
class Execution:
    """One execution of one node: its inputs, outputs and action records."""

    node: str
    kind: str
    occurrence: int
    iteration: int
    start_seq: int
    fingerprint: str
    reads: dict[str, Any]
    started_at: float
    status: ExecutionStatus = "running"
    end_seq: int | None = None
    finished_at: float | None = None
    writes: dict[str, Any] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    next: list[str] = field(default_factory=list)
    route: str | None = None
    memo: bool = False
    actions: list[Action] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    labels: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    # iteration bookkeeping before this node started, restored if it is interrupted
    prior_iteration: int = 1
    prior_iteration_nodes: Sequence[str] = field(default_factory=list)

    @property
    def duration_ms(self) -> float:
        if self.finished_at is None:
            return 0.0
        return round((self.finished_at - self.started_at) * 1000, 3)

    def path_entry(self) -> dict[str, Any]:
        return {
            "node": self.node, "occurrence": self.occurrence,
            "iteration": self.iteration, "status": self.status,
        }

    def to_wire(self) -> dict[str, Any]:
        return {
            "node": self.node, "kind": self.kind, "occurrence": self.occurrence,
            "iteration": self.iteration, "start_seq": self.start_seq,
            "fingerprint": self.fingerprint, "reads": self.reads,
            "started_at": self.started_at, "status": self.status, "end_seq": self.end_seq,
            "finished_at": self.finished_at, "writes": self.writes, "deletes": self.deletes,
            "next": self.next, "route": self.route, "memo": self.memo,
            "actions": [action_records.to_wire(a) for a in self.actions],
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens, "cost_usd": self.cost_usd,
            "labels": self.labels, "error": self.error,
            "prior_iteration": self.prior_iteration,
            "prior_iteration_nodes": list(self.prior_iteration_nodes),
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Execution:
        return cls.from_owned_wire(_private(data))

    def branch(self) -> Execution:
        """A copy of this open execution that folding further events into never changes
        ``self``: the reducers set its fields and append to its ``actions`` and ``labels``
        (``writes``, ``deletes``, ``next`` are replaced, copied here too all the same), and
        never edit the records, reads or values it holds, which are shared (a deep copy
        of a node's open execution was most of a waypoint's cost)."""
        other = copy.copy(self)
        other.actions, other.labels = list(self.actions), list(self.labels)
        other.writes, other.deletes, other.next = dict(self.writes), list(self.deletes), \
            list(self.next)
        return other

    @classmethod
    def from_owned_wire(cls, data: dict[str, Any]) -> Execution:
        """An execution from a wire form the caller gives away (its dicts are kept)."""
        data["actions"] = [action_records.from_wire(a) for a in data.get("actions", ())]
        return cls(**data)


@dataclass(frozen=True, slots=True)
class ForkOrigin:
    """Where a fork's state came from: set once by its ``run.forked`` event, never changed.

    Invariants: ``calls[:tail_from_call]`` and ``executions[:prefix_executions]`` of the
    fork's state are inherited from its base (the tail's own come after); ``holders`` says
    which run's log holds each inherited execution, as ``(run_id, first position)`` pairs in
    position order (a fork of a fork inherits executions held by its base's base).
    """

    base_run_id: str
    fork_sequence_id: int
    fork_node_id: str | None
    fork_group_id: str | None
    tail_from_call: int
    prefix_executions: int
    holders: tuple[tuple[str, int], ...]
    # a one-call fork of an imported run (SPEC §8 (a)): the call it re-asked, after which
    # it ended; the base's later calls were not re-executed. None: any other fork
    one_call: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "base_run_id": self.base_run_id, "fork_sequence_id": self.fork_sequence_id,
            "fork_node_id": self.fork_node_id, "fork_group_id": self.fork_group_id,
            "tail_from_call": self.tail_from_call,
            "prefix_executions": self.prefix_executions,
            "holders": [list(h) for h in self.holders]}
        if self.one_call is not None:  # absent otherwise: stored states keep their shape
            wire["one_call"] = self.one_call
        return wire

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ForkOrigin:
        """The origin in a stored state; a state stored before ``holders`` was kept had its
        whole prefix held by its base."""
        base = str(data.get("base_run_id") or "")
        holders = data.get("holders") or [[base, 0]]
        return cls(base_run_id=base, fork_sequence_id=int(data.get("fork_sequence_id", 0)),
                   fork_node_id=data.get("fork_node_id"), fork_group_id=data.get("fork_group_id"),
                   tail_from_call=int(data.get("tail_from_call", 0)),
                   prefix_executions=int(data.get("prefix_executions", 0)),
                   holders=tuple((str(run), int(at)) for run, at in holders),
                   one_call=data.get("one_call"))


@dataclass(slots=True)
class RunState:
    """Everything a run is at one version (the seq of the last event folded)."""

    run_id: str = ""
    version: int = 0
    status: RunStatus = RunStatus.QUEUED
    graph_id: str = ""
    graph_version: int = 0
    graph_hash: str = ""
    run_kind: RunKind = RunKind.PRIMARY
    replay_version: int = 0
    label: str = ""
    parent_run_id: str | None = None
    fork: ForkOrigin | None = None
    input: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    taint: set[str] = field(default_factory=set)
    frontier: list[str] = field(default_factory=list)
    arrivals: dict[str, list[str]] = field(default_factory=dict)
    iteration: int = 1
    iteration_nodes: list[str] = field(default_factory=list)
    occurrences: dict[str, int] = field(default_factory=dict)
    executions: list[Execution] = field(default_factory=list)
    current: Execution | None = None
    interrupted: list[Execution] = field(default_factory=list)
    pending_writes: dict[str, Any] = field(default_factory=dict)
    pending_deletes: list[str] = field(default_factory=list)
    pending_taint: dict[str, bool] = field(default_factory=dict)
    pending_human: dict[str, Any] | None = None
    calls: list[Call] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    suppressed_effects: list[dict[str, Any]] = field(default_factory=list)
    discarded_reflections: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    started_at: float | None = None
    finished_at: float | None = None

    # -- views ---------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    def path(self) -> list[dict[str, Any]]:
        """Node executions in order (the running/paused one last), SPEC §4.6 ``path``."""
        entries = [e.path_entry() for e in self.executions]
        if self.current is not None:
            entries.append(self.current.path_entry())
        return entries

    @property
    def tail_from_call(self) -> int:
        """Where the run's own calls begin in ``calls`` (0 unless it is a fork)."""
        return self.fork.tail_from_call if self.fork else 0

    @property
    def prefix_executions(self) -> int:
        """How many of ``executions`` it inherited (0 unless it is a fork)."""
        return self.fork.prefix_executions if self.fork else 0

    def all_executions(self) -> list[Execution]:
        return self.executions + ([self.current] if self.current is not None else [])

    def cost(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "usd": round(self.cost_usd, 8),
        }

    @property
    def duration_ms(self) -> float:
        if self.started_at is None or self.finished_at is None:
            return 0.0
        return round((self.finished_at - self.started_at) * 1000, 3)

    # -- serialization -------------------------------------------------------------------
    def to_wire(self) -> dict[str, Any]:
        """Full JSON form; ``from_wire(to_wire())`` is canonically equal to ``self``."""
        return {
            "run_id": self.run_id, "version": self.version, "status": self.status,
            "graph_id": self.graph_id, "graph_version": self.graph_version,
            "graph_hash": self.graph_hash, "run_kind": self.run_kind,
            "replay_version": self.replay_version, "label": self.label,
            "parent_run_id": self.parent_run_id,
            "fork": self.fork.to_wire() if self.fork else None, "input": self.input,
            "memory": self.memory, "taint": sorted(self.taint), "frontier": self.frontier,
            "arrivals": self.arrivals, "iteration": self.iteration,
            "iteration_nodes": self.iteration_nodes, "occurrences": self.occurrences,
            "executions": [e.to_wire() for e in self.executions],
            "current": self.current.to_wire() if self.current else None,
            "interrupted": [e.to_wire() for e in self.interrupted],
            "pending_writes": self.pending_writes, "pending_deletes": self.pending_deletes,
            "pending_taint": self.pending_taint, "pending_human": self.pending_human,
            "calls": [_call_wire(c) for c in self.calls],
            "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd, "unpriced_calls": self.unpriced_calls,
            "suppressed_effects": self.suppressed_effects,
            "discarded_reflections": self.discarded_reflections, "changes": self.changes,
            "error": self.error, "started_at": self.started_at,
            "finished_at": self.finished_at,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any], *, owned: bool = False) -> RunState:
        """Rebuild a state; ``owned=True`` means ``data`` is the caller's to give away
        (freshly decoded JSON), so it is used without a copy."""
        data = dict(data) if owned else _private(data)
        data["taint"] = set(data.get("taint", ()))
        data["status"] = RunStatus(data.get("status", RunStatus.QUEUED))
        data["run_kind"] = RunKind(data.get("run_kind", RunKind.PRIMARY))
        execution = Execution.from_owned_wire
        data["executions"] = [execution(e) for e in data.get("executions", ())]
        data["current"] = execution(data["current"]) if data.get("current") else None
        data["interrupted"] = [execution(e) for e in data.get("interrupted", ())]
        data["calls"] = [Call(**c) for c in data.get("calls", ())]
        data["fork"] = ForkOrigin.from_wire(data["fork"]) if data.get("fork") else None
        return cls(**data)

    def copy(self) -> RunState:
        """An independent deep copy (the fold mutates the state it owns)."""
        return copy.deepcopy(self)

    def branch(self) -> RunState:
        """A copy that folding further events into never changes ``self``, made without
        copying what nothing edits (what a live fork's state starts from: a 1,000-execution
        prefix in well under a millisecond, where its wire form's decoding took ~25 ms).

        Shared, not copied: finished executions and interrupted attempts (the reducers edit
        only the open execution, ``current``, and append finished ones), calls, and the JSON
        values held in memory, input, effects and changes (replaced, never edited in place;
        a live run already shares them with its events). Every container a reducer edits in
        place is fresh, the lists of ``arrivals`` too, and so is an open ``current`` (a
        snapshot taken inside a node: :meth:`Execution.branch`).
        ``canonical_equals(branch().to_wire(), to_wire())``.
        """
        state = copy.copy(self)
        for name in _EDITED_IN_PLACE:
            setattr(state, name, copy.copy(getattr(self, name)))
        state.arrivals = {node: list(arrived) for node, arrived in self.arrivals.items()}
        state.current = None if self.current is None else self.current.branch()
        return state

    def outcome(self) -> dict[str, Any]:
        """What fidelity compares: the run's result with identity and timestamps left out."""
        return {
            "status": self.status,
            "memory": self.memory,
            "taint": sorted(self.taint),
            "path": self.path(),
            "error": self.error,
            "suppressed_effects": self.suppressed_effects,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": round(self.cost_usd, 8),
        }


_EDITED_IN_PLACE = ("memory", "taint", "frontier", "iteration_nodes", "occurrences",
                    "executions", "interrupted", "pending_writes", "pending_deletes",
                    "pending_taint", "calls", "suppressed_effects", "discarded_reflections")
"""The containers of a state that ``evolve`` edits in place (``RunState.branch`` copies
them; the others it shares are replaced whole, never edited)."""


def _call_wire(call: Call) -> dict[str, Any]:
    return {
        "seq": call.seq, "node": call.node, "occurrence": call.occurrence,
        "kind": call.kind, "label": call.label, "role": call.role, "index": call.index,
        "model": call.model, "input_tokens": call.input_tokens,
        "output_tokens": call.output_tokens, "cost_usd": call.cost_usd,
    }
