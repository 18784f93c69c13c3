"""Fork points: every address form resolves to one boundary of a run's logical run (SPEC §3.2).

A boundary ``b`` of a log means "the state after event ``b``"; a valid fork boundary is
immediately before a ``node.started`` (``b = started.seq - 1``), or the end boundary after the
last node finished. Anything else would split a node and is refused naming it.

The *logical run* of a fork F is its inherited prefix (the executions up to F's effective
point in its base's logical run) followed by F's own executions; of a primary run, its own
executions. Every named form (``start``, ``before_node``, ``after_node``, ``iteration``,
``first-read``/``first-write``, ``human``, ``failure``) resolves in it, so on a fork ``start``
re-runs the whole graph and inherited nodes are addressable. A point carries the ``seq`` of
the log that holds it and that run's id; ``{"sequence": n}`` addresses the run's own log
(``{"sequence": n, "run_id": r}`` an inherited boundary held by run ``r``).

:class:`RunIndex` is built once (O(n) in the log) and answers every form. Executions behind
a compaction boundary (or in an archived ancestor's log) are known but not forkable: an
address resolving to one names the earliest forkable point.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from forklab.engine.actions import AgentAsked, ToolCall, call_of
from forklab.engine.calls import turn_call
from forklab.engine.events import (
    TERMINAL_TYPES,
    AgentRequested,
    AnyEvent,
    MemoryWritten,
    NodeCompleted,
    NodeFailed,
    NodeInterrupted,
    NodeReused,
    NodeStarted,
    RunForked,
    ToolCalled,
)
from forklab.engine.state import Execution, RunState


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """One addressable boundary (the Fork point shape of SPEC §4.6).

    ``seq`` is a boundary of the log of run ``run_id`` (the run holding it in the logical
    run); ``position`` is how many executions of the logical run come before it.
    """

    seq: int
    node: str | None
    occurrence: int | None
    iteration: int | None
    kind: str = "before_node"  # before_node | before_call | end
    run_id: str | None = None
    position: int | None = field(default=None, compare=False)
    # before_call: the call key (``assist#1/turn:3``). The boundary ``seq`` is the node's:
    # the node re-executes with the calls recorded before this one served from the log
    call: str | None = None

    @property
    def label(self) -> str:
        if self.kind == "end":
            return "end of the run, after the last node"
        where = f"'{self.node}' execution {self.occurrence}, iteration {self.iteration}"
        if self.call is not None:
            return f"before call '{self.call}' (inside {where})"
        return f"before {where}"

    def address(self) -> dict[str, Any]:
        """The canonical JSON form that resolves back to this point."""
        if self.call is not None:
            return {"before_call": self.call}
        return {"sequence": self.seq, **({"run_id": self.run_id} if self.run_id else {})}

    def to_wire(self) -> dict[str, Any]:
        return {"seq": self.seq, "node": self.node, "occurrence": self.occurrence,
                "iteration": self.iteration, "kind": self.kind, "label": self.label,
                "run_id": self.run_id, "call": self.call}


@dataclass(slots=True)
class Entry:
    """One execution of the logical run, with what the address forms need."""

    position: int
    node: str
    kind: str
    occurrence: int
    iteration: int
    start: int
    end: int | None
    outcome: str  # completed | failed | blocked | cancelled | running
    reads: tuple[str, ...]
    writes: set[str]
    run_id: str
    missing: str | None = None  # None (forkable) | "compacted" | "archived" | "deleted"
    # the calls the execution recorded, in order: (call key part, provider call id)
    calls: list[tuple[str, str | None]] = field(default_factory=list)

    def point(self) -> ForkPoint:
        return ForkPoint(seq=self.start - 1, node=self.node, occurrence=self.occurrence,
                         iteration=self.iteration, run_id=self.run_id,
                         position=self.position)

    def call_point(self, part: str) -> ForkPoint:
        """The point before call ``part`` of this execution (SPEC §6.2)."""
        return ForkPoint(seq=self.start - 1, node=self.node, occurrence=self.occurrence,
                         iteration=self.iteration, kind="before_call", run_id=self.run_id,
                         position=self.position,
                         call=f"{self.node}#{self.occurrence}/{part}")

    def call_points(self) -> list[ForkPoint]:
        """A point before every call but the first (before which the node point stands), in
        an execution that looped — made more than one turn or called a tool. The one-turn
        calls of a node with roles are addressed by the node's point and role changes."""
        looped = any(not part.endswith("turn:1") or "/tool:" in part
                     for part, _ in self.calls)
        return [self.call_point(part) for part, _ in self.calls[1:]] if looped else []


@dataclass(slots=True)
class _Exec:
    node: str
    kind: str
    occurrence: int
    iteration: int
    start: int
    end: int | None = None
    outcome: str = "running"  # completed | failed | interrupted | running
    # the keys read as recorded (the event's reads mapping, shared: a tuple of its keys is
    # made only if the graph's declared reads are unknown, as Entry needs them)
    reads: Collection[str] = ()
    writes: set[str] = field(default_factory=set)
    calls: list[tuple[str, str | None]] = field(default_factory=list)


_OUTCOME = {NodeCompleted.TYPE: "completed", NodeFailed.TYPE: "failed",
            NodeInterrupted.TYPE: "interrupted"}
_ENDS = frozenset({NodeCompleted, NodeFailed, NodeInterrupted})


def _scan(events: Sequence[AnyEvent]) -> tuple[list[_Exec], int | None]:
    """The node executions of one log (interrupted ones included) and its terminal seq.

    Dispatches on the event's exact class (events are final dataclasses, never subclassed)
    rather than an ``isinstance`` chain: this loop visits every event of a base on each cold
    fork setup, and the chain was most of its cost.
    """
    execs: list[_Exec] = []
    open_: dict[str, _Exec] = {}
    terminal = None
    for event in events:
        cls = type(event)
        if cls is NodeStarted:
            started = cast(NodeStarted, event)
            ex = _Exec(node=started.node or "", kind=started.kind,
                       occurrence=started.occurrence or 1, iteration=started.iteration or 1,
                       start=started.seq, reads=started.reads)
            execs.append(ex)
            open_[ex.node] = ex
        elif cls is NodeReused:  # a served node: started and completed in one event
            reused = cast(NodeReused, event)
            execs.append(_Exec(node=reused.node or "", kind=reused.kind,
                               occurrence=reused.occurrence or 1,
                               iteration=reused.iteration or 1, start=reused.seq,
                               end=reused.seq, outcome="completed", reads=reused.reads,
                               writes={*reused.writes, *reused.deletes}))
        elif cls is MemoryWritten:
            if event.node in open_:
                open_[event.node].writes.add(cast(MemoryWritten, event).key)
        elif cls is AgentRequested:
            if event.node in open_:
                asked = cast(AgentRequested, event)
                open_[event.node].calls.append(
                    (asked.call or turn_call(1, asked.role, asked.index), None))
        elif cls is ToolCalled:
            called = cast(ToolCalled, event)
            if called.call is not None and event.node in open_:
                open_[event.node].calls.append((called.call, called.call_id))
        elif cls in _ENDS:
            done = open_.pop(event.node or "", None)
            if done is not None:
                done.end, done.outcome = event.seq, _OUTCOME[event.type]
        elif event.type in TERMINAL_TYPES:
            terminal = event.seq
    return execs, terminal


ReadsOf = Callable[[str, str], Sequence[str] | None]
"""(run id, node) -> the reads that node declares in the graph that run executed, or None."""


def _from_execution(position: int, ex: Execution, run_id: str, reads_of: ReadsOf | None,
                    missing: str | None) -> Entry:
    declared = reads_of(run_id, ex.node) if reads_of else None
    return Entry(position=position, node=ex.node, kind=ex.kind, occurrence=ex.occurrence,
                 iteration=ex.iteration, start=ex.start_seq, end=ex.end_seq,
                 outcome=ex.status, reads=tuple(ex.reads if declared is None else declared),
                 writes=set(ex.writes) | set(ex.deletes), run_id=run_id, missing=missing,
                 calls=recorded_calls(ex))


def recorded_calls(ex: Execution) -> list[tuple[str, str | None]]:
    """(call key part, provider call id) of every call an execution recorded, in order."""
    calls: list[tuple[str, str | None]] = []
    for action in ex.actions:
        if isinstance(action, AgentAsked):
            calls.append((call_of(action) or "", None))
        elif isinstance(action, ToolCall) and action.call is not None:
            calls.append((action.call, action.call_id))
    return calls


def _holder(holders: Sequence[tuple[str, int]], position: int) -> str:
    run_id = holders[0][0] if holders else ""
    for holder, start in holders:
        if position >= start:
            run_id = holder
    return run_id


@dataclass
class RunIndex:
    """The logical run of one run: every execution, by position, and its own log's extent."""

    run_id: str = ""
    entries: list[Entry] = field(default_factory=list)
    own: list[_Exec] = field(default_factory=list)
    first_seq: int = 1
    last_seq: int = 0
    terminal_seq: int | None = None
    completed: bool = False
    end_missing: bool = False  # the end boundary's events are gone (compacted, no snapshot)

    @classmethod
    def build(cls, events: Sequence[AnyEvent], state: RunState | None = None, *,
              reads_of: ReadsOf | None = None,
              missing: Callable[[str, int], str | None] | None = None) -> RunIndex:
        """Index ``events`` (a run's own log) and, from ``state`` (its folded final state;
        folded from ``events`` when they start at seq 1 and are a fork's), the executions it
        inherited or lost to compaction. ``reads_of`` gives declared reads (default: the keys
        recorded present); ``missing(run_id, seq)`` says whether boundary ``seq`` of that run's
        log is gone (archived, or compacted with no snapshot to fold on from)."""
        own, terminal = _scan(events)
        run_id = events[0].run_id if events else (state.run_id if state else "")
        index = cls(run_id=run_id, own=own, terminal_seq=terminal,
                    first_seq=events[0].seq if events else 1,
                    last_seq=events[-1].seq if events else 0)
        if state is None and events and events[0].seq == 1 and len(events) > 1 \
                and isinstance(events[1], RunForked):
            from forklab.engine.reducers import fold

            state = fold(events)
        index.completed = state is not None and state.status == "completed"
        index._add_state_entries(state, reads_of, missing)
        for ex in own:
            if ex.outcome == "interrupted":
                continue
            declared = reads_of(run_id, ex.node) if reads_of else None
            index.entries.append(Entry(
                position=len(index.entries), node=ex.node, kind=ex.kind,
                occurrence=ex.occurrence, iteration=ex.iteration, start=ex.start, end=ex.end,
                outcome=ex.outcome, reads=tuple(ex.reads if declared is None else declared),
                writes=ex.writes, run_id=run_id, calls=ex.calls,
                missing=missing(run_id, ex.start - 1) if missing else None))
        end = index.end_boundary()
        index.end_missing = end is not None and missing is not None \
            and missing(run_id, end) is not None
        return index

    def _add_state_entries(self, state: RunState | None, reads_of: ReadsOf | None,
                           missing: Callable[[str, int], str | None] | None) -> None:
        """Inherited executions (held by ancestors) and own ones behind compaction."""
        if state is None:
            return
        inherited = state.prefix_executions
        holders = state.fork.holders if state.fork else ()
        for i, ex in enumerate(state.executions[:inherited]):
            holder = _holder(holders, i)
            self.entries.append(_from_execution(i, ex, holder, reads_of,
                                                missing(holder, ex.start_seq - 1)
                                                if missing else None))
        first_own = self.own[0].start if self.own else self.terminal_seq or self.last_seq + 1
        for ex in state.executions[inherited:]:
            if ex.start_seq < first_own:
                self.entries.append(_from_execution(len(self.entries), ex, self.run_id,
                                                    reads_of, "compacted"))

    # -- listing ---------------------------------------------------------------------------
    def live_execs(self) -> list[Entry]:
        """Every execution of the logical run (an interrupted attempt is superseded)."""
        return self.entries

    def forkable(self) -> list[Entry]:
        return [e for e in self.entries if e.missing is None]

    def points(self) -> list[ForkPoint]:
        """Every forkable boundary of the logical run, in order (the end one last)."""
        pts = [p for e in self.forkable() for p in (e.point(), *e.call_points())]
        end = self.end_point()
        return pts + ([end] if end is not None else [])

    def end_boundary(self) -> int | None:
        """The own log's boundary after the last node, when the run ran out of nodes."""
        if self.terminal_seq is None or not self.entries:
            return None
        own = [e for e in self.own if e.outcome != "interrupted"]
        if own:
            last = own[-1]
            ok = last.outcome == "completed" and last.end == self.terminal_seq - 1
            return last.end if ok else None
        last_entry = self.entries[-1]
        if self.completed and last_entry.outcome == "completed":
            return self.terminal_seq - 1  # a fork whose tail ran no node
        return None

    def end_point(self) -> ForkPoint | None:
        end = self.end_boundary()
        if end is None or self.end_missing:
            return None
        return ForkPoint(seq=end, node=None, occurrence=None, iteration=None, kind="end",
                         run_id=self.run_id, position=len(self.entries))

    def point_at(self, seq: int, run_id: str | None = None) -> ForkPoint | None:
        """The point of boundary ``seq`` of run ``run_id``'s log (this run's by default)."""
        run_id = run_id or self.run_id
        for point in self.points():
            if point.seq == seq and point.run_id == run_id:
                return point
        return None

    def nodes_that_ran(self) -> list[str]:
        return list(dict.fromkeys(e.node for e in self.entries))

    def executions_of(self, node: str) -> list[Entry]:
        return [e for e in self.entries if e.node == node]

    def earliest(self) -> int | None:
        """The seq of the first point listed (one that forks), or None."""
        first = self.earliest_point()
        return first.seq if first else None

    def earliest_point(self) -> ForkPoint | None:
        points = self.points()
        return points[0] if points else None

    def earliest_text(self) -> str:
        """The earliest forkable point as an error names it: ``seq N`` of this run's log, or
        ``seq N of run R (seq:N@R)`` for a boundary an ancestor's log holds."""
        first = self.earliest_point()
        if first is None:
            return "none (no boundary of this run can be forked from its events)"
        if first.run_id in (None, self.run_id):
            return f"seq {first.seq}"
        return f"seq {first.seq} of run {first.run_id!r} (seq:{first.seq}@{first.run_id})"


__all__ = ["Entry", "ForkPoint", "RunIndex"]
