"""Fork points: every address form resolves to one boundary seq (SPEC §3.2).

A boundary ``b`` means "the state after event ``b``"; a valid fork boundary is immediately
before a ``node.started`` (so ``b = started.seq - 1``), or the end boundary after the last
node finished. Anything else would split a node and is refused naming it.

:class:`RunIndex` scans a log once (O(n)) and answers every form without refolding.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.errors import ForkPointMidNode, ForkPointNotFound
from forklab.engine.events import (
    TERMINAL_TYPES,
    AnyEvent,
    MemoryWritten,
    NodeCompleted,
    NodeFailed,
    NodeInterrupted,
    NodeStarted,
)


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """One addressable boundary (the Fork point shape of SPEC §4.6)."""

    seq: int
    node: str | None
    occurrence: int | None
    iteration: int | None
    kind: str = "before_node"  # before_node | end

    @property
    def label(self) -> str:
        if self.kind == "end":
            return "end of the run (after the last node)"
        return f"before '{self.node}' execution {self.occurrence}, iteration {self.iteration}"

    def to_wire(self) -> dict[str, Any]:
        return {"seq": self.seq, "node": self.node, "occurrence": self.occurrence,
                "iteration": self.iteration, "kind": self.kind, "label": self.label}


@dataclass(slots=True)
class _Exec:
    node: str
    kind: str
    occurrence: int
    iteration: int
    start: int
    end: int | None = None
    outcome: str = "running"  # completed | failed | interrupted | running
    reads: tuple[str, ...] = ()
    writes: set[str] = field(default_factory=set)


@dataclass
class RunIndex:
    """Node executions of one log, by position."""

    execs: list[_Exec] = field(default_factory=list)
    first_seq: int = 1
    last_seq: int = 0
    terminal_seq: int | None = None

    @classmethod
    def build(cls, events: Sequence[AnyEvent]) -> RunIndex:
        index = cls(first_seq=events[0].seq if events else 1,
                    last_seq=events[-1].seq if events else 0)
        open_: dict[str, _Exec] = {}
        for event in events:
            if isinstance(event, NodeStarted):
                ex = _Exec(node=event.node or "", kind=event.kind,
                           occurrence=event.occurrence or 1, iteration=event.iteration or 1,
                           start=event.seq, reads=tuple(event.reads))
                index.execs.append(ex)
                open_[ex.node] = ex
            elif isinstance(event, MemoryWritten) and event.node in open_:
                open_[event.node].writes.add(event.key)
            elif isinstance(event, (NodeCompleted, NodeFailed, NodeInterrupted)):
                ex_done = open_.pop(event.node or "", None)
                if ex_done is not None:
                    ex_done.end = event.seq
                    ex_done.outcome = {NodeCompleted.TYPE: "completed", NodeFailed.TYPE: "failed",
                                       NodeInterrupted.TYPE: "interrupted"}[event.type]
            elif event.type in TERMINAL_TYPES:
                index.terminal_seq = event.seq
        return index

    # -- listing ---------------------------------------------------------------------------
    def live_execs(self) -> list[_Exec]:
        """Executions that count (an interrupted attempt is superseded by its re-run)."""
        return [e for e in self.execs if e.outcome != "interrupted"]

    def points(self) -> list[ForkPoint]:
        pts = [ForkPoint(seq=e.start - 1, node=e.node, occurrence=e.occurrence,
                         iteration=e.iteration) for e in self.live_execs()]
        end = self.end_boundary()
        if end is not None:
            pts.append(ForkPoint(seq=end, node=None, occurrence=None, iteration=None, kind="end"))
        return pts

    def end_boundary(self) -> int | None:
        """The boundary after the last node, when the run finished by running out of nodes."""
        execs = self.live_execs()
        if self.terminal_seq is None or not execs:
            return None
        last = execs[-1]
        if last.outcome == "completed" and last.end == self.terminal_seq - 1:
            return last.end
        return None

    def point_at(self, seq: int) -> ForkPoint | None:
        for point in self.points():
            if point.seq == seq:
                return point
        return None

    def nodes_that_ran(self) -> list[str]:
        return list(dict.fromkeys(e.node for e in self.live_execs()))

    def executions_of(self, node: str) -> list[_Exec]:
        return [e for e in self.live_execs() if e.node == node]


def fork_points(events: Sequence[AnyEvent]) -> list[ForkPoint]:
    """Every addressable boundary of a run, in order, with node, occurrence and iteration."""
    return RunIndex.build(events).points()


# -- resolution ------------------------------------------------------------------------------


def _occurrence(index: RunIndex, node: str, occurrence: int | str | None) -> _Exec:
    runs = index.executions_of(node)
    if not runs:
        raise ForkPointNotFound(
            f"node {node!r} never ran in this run; nodes that ran: "
            f"{', '.join(index.nodes_that_ran()) or 'none'}",
            node=node, nodes_that_ran=index.nodes_that_ran(),
        )
    if occurrence == "last":
        return runs[-1]
    occurrence = 1 if occurrence is None else occurrence
    # match the recorded occurrence number, not the position: a compacted log or a fork's
    # own log starts part-way through a node's executions
    found = next((e for e in runs if e.occurrence == occurrence), None)
    if found is not None:
        return found
    executions = runs[-1].occurrence
    if isinstance(occurrence, int) and 1 <= occurrence < runs[0].occurrence:
        earliest = index.points()[0].seq
        raise ForkPointNotFound(
            f"execution {occurrence} of node {node!r} is not in this log (it starts at "
            f"execution {runs[0].occurrence}: compacted, or inherited from the run this one "
            f"forked); the earliest forkable point is seq {earliest}",
            node=node, executions=executions, earliest_forkable=earliest,
        )
    raise ForkPointNotFound(
        f"node {node!r} executed {executions} time(s); occurrence {occurrence!r} is out of "
        f"range (use 1..{executions} or \"last\")",
        node=node, executions=executions,
    )


def _check_sequence(index: RunIndex, seq: int) -> ForkPoint:
    point = index.point_at(seq)
    if point is not None:
        return point
    if seq < index.first_seq - 1 or seq < 1:
        earliest = index.points()[0].seq if index.points() else None
        raise ForkPointNotFound(
            f"seq {seq} is before the earliest forkable point (seq {earliest}); events before "
            f"seq {index.first_seq} are not available",
            seq=seq, earliest_forkable=earliest,
        )
    for ex in index.execs:
        if ex.start <= seq and (ex.end is None or seq < ex.end):
            raise ForkPointMidNode(
                f"seq {seq} is inside the execution of node {ex.node!r} (execution "
                f"{ex.occurrence}, seqs {ex.start}..{ex.end}); fork at seq {ex.start - 1} "
                f"(before it) or seq {ex.end} (after it)",
                seq=seq, node=ex.node, occurrence=ex.occurrence,
            )
    raise ForkPointNotFound(
        f"seq {seq} is not a node boundary of this run (last seq {index.last_seq}); list the "
        "boundaries with fork_points()",
        seq=seq,
    )


def resolve_point(index: RunIndex, at: Any, *, status: str,
                  failed_node: str | None = None) -> ForkPoint:
    """Resolve any JSON/Python fork-point form (not ``version``/``where``) to a boundary."""
    at = parse_point(at) if isinstance(at, str) and at not in ("start", "failure") else at
    if at is None:
        if status != "failed":
            raise ForkPointNotFound(
                f"no fork point given and the run is {status}; 'failure' is only the default "
                "for a failed run — pass at (e.g. {\"before_node\": \"write\"})",
            )
        at = "failure"
    if at == "start":
        execs = index.live_execs()
        if not execs:
            raise ForkPointNotFound("the run executed no node; there is nothing to fork")
        if index.first_seq > 1:
            earliest = index.points()[0].seq
            raise ForkPointNotFound(
                f"the start of the run is behind its compaction boundary (events before seq "
                f"{index.first_seq} are gone); the earliest forkable point is seq {earliest}",
                earliest_forkable=earliest)
        return _check_sequence(index, execs[0].start - 1)
    if at == "failure":
        failed = [e for e in index.live_execs() if e.outcome == "failed"]
        if not failed:
            raise ForkPointNotFound(
                f"the run is {status} and no node failed; choose another fork point",
                status=status,
            )
        return _check_sequence(index, failed[-1].start - 1)
    if not isinstance(at, dict):
        raise ForkPointNotFound(f"unrecognised fork point {at!r}; see SPEC §3.2 for the forms")
    return _resolve_dict(index, at)


def _resolve_dict(index: RunIndex, at: dict[str, Any]) -> ForkPoint:
    if "sequence" in at:
        return _check_sequence(index, point_number(at, "sequence"))
    if "before_node" in at:
        ex = _occurrence(index, at["before_node"], at.get("occurrence"))
        return _check_sequence(index, ex.start - 1)
    if "after_node" in at:
        ex = _occurrence(index, at["after_node"], at.get("occurrence"))
        if ex.outcome != "completed" or ex.end is None:
            raise ForkPointNotFound(
                f"execution {ex.occurrence} of {ex.node!r} did not complete ({ex.outcome}); "
                "fork before it instead", node=ex.node,
            )
        return _check_sequence(index, ex.end)
    if "before_iteration" in at:
        n = point_number(at, "before_iteration")
        for ex in index.live_execs():
            if ex.iteration == n:
                return _check_sequence(index, ex.start - 1)
        most = max((e.iteration for e in index.live_execs()), default=0)
        raise ForkPointNotFound(f"the run has {most} iteration(s); iteration {n} never started",
                                iterations=most)
    for form, attr in (("before_first_write_of", "writes"), ("before_first_read_of", "reads")):
        if form in at:
            key = at[form]
            if not isinstance(key, str):
                raise ForkPointNotFound(f"fork point {form!r} takes a memory key (a string); "
                                        f"got {key!r}", form=form)
            for ex in index.live_execs():
                if key in getattr(ex, attr) and (attr == "reads" or ex.outcome == "completed"):
                    return _check_sequence(index, ex.start - 1)
            verb = "wrote" if attr == "writes" else "read"
            raise ForkPointNotFound(f"no node {verb} memory key {key!r} in this run", key=key)
    if at.get("before_human_input"):
        for ex in index.live_execs():
            if ex.kind == "approval":
                return _check_sequence(index, ex.start - 1)
        raise ForkPointNotFound("no approval gate ran in this run")
    raise ForkPointNotFound(
        f"unrecognised fork point {at!r}; expected one of start, failure, sequence, "
        "before_node, after_node, before_iteration, before_human_input, "
        "before_first_write_of, before_first_read_of, version"
    )


def point_number(at: dict[str, Any], form: str) -> int:
    """A point form's number: an int, or a string of digits (as the CLI form gives it)."""
    value = at[form]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise ForkPointNotFound(f"fork point {form!r} takes an integer; got {value!r}", form=form)


_CLI = re.compile(r"^(?P<verb>seq|before|after|iteration|first-write|first-read|version)"
                  r":(?P<arg>[^#]+)(#(?P<occ>\d+|last))?$")


def parse_point(text: str) -> dict[str, Any] | str:
    """The CLI form (``before:write#2``, ``seq:6``, ``human``…) as the JSON form."""
    text = text.strip()
    if text in ("start", "failure"):
        return text
    if text == "human":
        return {"before_human_input": True}
    match = _CLI.match(text)
    if not match:
        raise ForkPointNotFound(
            f"cannot read fork point {text!r}; use start, failure, seq:N, before:NODE[#N|#last], "
            "after:NODE[#N|#last], iteration:N, human, first-write:KEY, first-read:KEY or "
            "version:N"
        )
    verb, arg, occ = match["verb"], match["arg"], match["occ"]
    occurrence: int | str | None = None if occ is None else (occ if occ == "last" else int(occ))
    try:
        simple: dict[str, Callable[[], dict[str, Any]]] = {
            "seq": lambda: {"sequence": int(arg)},
            "iteration": lambda: {"before_iteration": int(arg)},
            "version": lambda: {"version": int(arg)},
            "first-write": lambda: {"before_first_write_of": arg},
            "first-read": lambda: {"before_first_read_of": arg},
        }
        if verb in simple:
            return simple[verb]()
    except ValueError:
        raise ForkPointNotFound(f"fork point {text!r}: {arg!r} is not a number") from None
    key = "before_node" if verb == "before" else "after_node"
    point: dict[str, Any] = {key: arg}
    if occurrence is not None:
        point["occurrence"] = occurrence
    return point
