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

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.errors import ForkPointMidNode, ForkPointNotFound, SourceMissing
from forklab.engine.events import (
    TERMINAL_TYPES,
    AnyEvent,
    MemoryWritten,
    NodeCompleted,
    NodeFailed,
    NodeInterrupted,
    NodeStarted,
    RunForked,
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
    kind: str = "before_node"  # before_node | end
    run_id: str | None = None
    position: int | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        if self.kind == "end":
            return "end of the run (after the last node)"
        return f"before '{self.node}' execution {self.occurrence}, iteration {self.iteration}"

    def address(self) -> dict[str, Any]:
        """The canonical JSON form that resolves back to this point."""
        return {"sequence": self.seq, **({"run_id": self.run_id} if self.run_id else {})}

    def to_wire(self) -> dict[str, Any]:
        return {"seq": self.seq, "node": self.node, "occurrence": self.occurrence,
                "iteration": self.iteration, "kind": self.kind, "label": self.label,
                "run_id": self.run_id}


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
    missing: str | None = None  # None (forkable) | "compacted" | "archived"

    def point(self) -> ForkPoint:
        return ForkPoint(seq=self.start - 1, node=self.node, occurrence=self.occurrence,
                         iteration=self.iteration, run_id=self.run_id,
                         position=self.position)


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


_OUTCOME = {NodeCompleted.TYPE: "completed", NodeFailed.TYPE: "failed",
            NodeInterrupted.TYPE: "interrupted"}


def _scan(events: Sequence[AnyEvent]) -> tuple[list[_Exec], int | None]:
    """The node executions of one log (interrupted ones included) and its terminal seq."""
    execs: list[_Exec] = []
    open_: dict[str, _Exec] = {}
    terminal = None
    for event in events:
        if isinstance(event, NodeStarted):
            ex = _Exec(node=event.node or "", kind=event.kind, occurrence=event.occurrence or 1,
                       iteration=event.iteration or 1, start=event.seq, reads=tuple(event.reads))
            execs.append(ex)
            open_[ex.node] = ex
        elif isinstance(event, MemoryWritten) and event.node in open_:
            open_[event.node].writes.add(event.key)
        elif isinstance(event, (NodeCompleted, NodeFailed, NodeInterrupted)):
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
                 writes=set(ex.writes) | set(ex.deletes), run_id=run_id, missing=missing)


def _holder(holders: Sequence[Sequence[Any]], position: int) -> str:
    run_id = str(holders[0][0]) if holders else ""
    for holder, start in holders:
        if position >= int(start):
            run_id = str(holder)
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

    @classmethod
    def build(cls, events: Sequence[AnyEvent], state: RunState | None = None, *,
              reads_of: ReadsOf | None = None,
              missing: Callable[[str], str | None] | None = None) -> RunIndex:
        """Index ``events`` (a run's own log) and, from ``state`` (its folded final state;
        folded from ``events`` when they start at seq 1 and are a fork's), the executions it
        inherited or lost to compaction. ``reads_of`` gives declared reads (default: the keys
        recorded present); ``missing(run_id)`` says whether an ancestor's log is gone."""
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
                writes=ex.writes, run_id=run_id))
        return index

    def _add_state_entries(self, state: RunState | None, reads_of: ReadsOf | None,
                           missing: Callable[[str], str | None] | None) -> None:
        """Inherited executions (held by ancestors) and own ones behind compaction."""
        if state is None:
            return
        fork = state.fork or {}
        inherited = int(fork.get("prefix_executions", 0))
        holders = fork.get("holders") or [[fork.get("base_run_id", ""), 0]]
        for i, ex in enumerate(state.executions[:inherited]):
            holder = _holder(holders, i)
            self.entries.append(_from_execution(i, ex, holder, reads_of,
                                                missing(holder) if missing else None))
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
        pts = [e.point() for e in self.forkable()]
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
        if end is None:
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
        points = self.points()
        return points[0].seq if points else None


def fork_points(events: Sequence[AnyEvent], *, store: Any = None) -> list[ForkPoint]:
    """Every addressable boundary of a run's logical run, in order, with node, occurrence,
    iteration, seq and the id of the run whose log holds it.

    ``events`` is the run's own log; with ``store``, a fork's ancestors are looked up so
    boundaries in a log that is gone are left out.
    """
    from forklab.engine.errors import ForklabError

    if store is not None and len(events) > 1 and isinstance(events[1], RunForked):
        from forklab.engine.fork.core import load_base

        try:
            return load_base(events[0].run_id, store=store, env=None,
                             require_finished=False).index.points()
        except ForklabError:  # listing never fails: the log alone still lists its points
            pass
    return RunIndex.build(events).points()


# -- resolution ------------------------------------------------------------------------------


def _forkable(index: RunIndex, entry: Entry, what: str) -> ForkPoint:
    """The entry's point, or why it cannot be forked (compacted, archived)."""
    if entry.missing is None:
        return entry.point()
    earliest = index.earliest()
    if entry.missing == "archived":
        raise SourceMissing(
            f"{what} is in the log of run {entry.run_id!r}, which was archived (its events are "
            f"gone); fork a later point (the earliest forkable point is seq {earliest})",
            run_id=entry.run_id, earliest_forkable=earliest)
    raise ForkPointNotFound(
        f"{what} is behind the compaction boundary of run {entry.run_id!r} (its events are "
        f"gone); the earliest forkable point is seq {earliest}",
        earliest_forkable=earliest, node=entry.node)


def _occurrence(index: RunIndex, node: str, occurrence: int | str | None) -> Entry:
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
    found = next((e for e in runs if e.occurrence == occurrence), None)
    if found is not None:
        return found
    executions = runs[-1].occurrence
    if isinstance(occurrence, int) and 1 <= occurrence < runs[0].occurrence:
        earliest = index.earliest()
        raise ForkPointNotFound(
            f"execution {occurrence} of node {node!r} is not in this log (it starts at "
            f"execution {runs[0].occurrence}); the earliest forkable point is seq {earliest}",
            node=node, executions=executions, earliest_forkable=earliest,
        )
    raise ForkPointNotFound(
        f"node {node!r} executed {executions} time(s); occurrence {occurrence!r} is out of "
        f"range (use 1..{executions} or \"last\")",
        node=node, executions=executions,
    )


def _check_sequence(index: RunIndex, seq: int, run_id: str | None = None) -> ForkPoint:
    if run_id and run_id != index.run_id:
        return _inherited_sequence(index, seq, run_id)
    point = index.point_at(seq)
    if point is not None:
        return point
    for entry in index.entries:
        if entry.run_id == index.run_id and entry.start - 1 == seq:
            return _forkable(index, entry, f"seq {seq}")
    if seq < index.first_seq - 1 or seq < 1:
        earliest = index.earliest()
        raise ForkPointNotFound(
            f"seq {seq} is before the earliest forkable point (seq {earliest}); events before "
            f"seq {index.first_seq} are not available",
            seq=seq, earliest_forkable=earliest,
        )
    for ex in index.own:
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


def _inherited_sequence(index: RunIndex, seq: int, run_id: str) -> ForkPoint:
    held = [e for e in index.entries if e.run_id == run_id]
    for entry in held:
        if entry.start - 1 == seq:
            return _forkable(index, entry, f"seq {seq} of run {run_id!r}")
    holders = list(dict.fromkeys(e.run_id for e in index.entries))
    raise ForkPointNotFound(
        f"seq {seq} of run {run_id!r} is not a boundary of this run's logical run; it holds "
        + (f"seqs {', '.join(str(e.start - 1) for e in held)} of that run" if held else
           f"no execution of that run (runs: {', '.join(holders)})"),
        seq=seq, run_id=run_id)


def _at_position(index: RunIndex, position: int, what: str) -> ForkPoint:
    if position < len(index.entries):
        return _forkable(index, index.entries[position], what)
    end = index.end_point()
    if end is None:
        raise ForkPointNotFound(f"{what}: nothing follows it in this run (it ended "
                                "without running out of nodes); fork before it instead")
    return end


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
        if not index.entries:
            raise ForkPointNotFound("the run executed no node; there is nothing to fork")
        return _forkable(index, index.entries[0], "the start of the run")
    if at == "failure":
        failed = [e for e in index.entries if e.outcome == "failed"]
        if not failed:
            raise ForkPointNotFound(
                f"the run is {status} and no node failed; choose another fork point",
                status=status,
            )
        return _forkable(index, failed[-1], f"the failed node {failed[-1].node!r}")
    if not isinstance(at, dict):
        raise ForkPointNotFound(f"unrecognised fork point {at!r}; see SPEC §3.2 for the forms")
    return _resolve_dict(index, at)


def _resolve_dict(index: RunIndex, at: dict[str, Any]) -> ForkPoint:
    if "sequence" in at:
        run_id = at.get("run_id")
        if run_id is not None and not isinstance(run_id, str):
            raise ForkPointNotFound(f"fork point 'run_id' takes a run id; got {run_id!r}")
        return _check_sequence(index, point_number(at, "sequence"), run_id)
    if "before_node" in at:
        ex = _occurrence(index, at["before_node"], at.get("occurrence"))
        return _forkable(index, ex, f"execution {ex.occurrence} of {ex.node!r}")
    if "after_node" in at:
        ex = _occurrence(index, at["after_node"], at.get("occurrence"))
        if ex.outcome != "completed":
            raise ForkPointNotFound(
                f"execution {ex.occurrence} of {ex.node!r} did not complete ({ex.outcome}); "
                "fork before it instead", node=ex.node,
            )
        return _at_position(index, ex.position + 1, f"after execution {ex.occurrence} of "
                                                    f"{ex.node!r}")
    if "before_iteration" in at:
        return _iteration(index, point_number(at, "before_iteration"))
    for form, attr in (("before_first_write_of", "writes"), ("before_first_read_of", "reads")):
        if form in at:
            return _first_use(index, form, attr, at[form])
    if at.get("before_human_input"):
        for ex in index.entries:
            if ex.kind == "approval":
                return _forkable(index, ex, f"the approval gate {ex.node!r}")
        raise ForkPointNotFound("no approval gate ran in this run")
    raise ForkPointNotFound(
        f"unrecognised fork point {at!r}; expected one of start, failure, sequence, "
        "before_node, after_node, before_iteration, before_human_input, "
        "before_first_write_of, before_first_read_of, version"
    )


def _iteration(index: RunIndex, n: int) -> ForkPoint:
    for ex in index.entries:
        if ex.iteration == n:
            return _forkable(index, ex, f"iteration {n}")
    most = max((e.iteration for e in index.entries), default=0)
    raise ForkPointNotFound(f"the run has {most} iteration(s); iteration {n} never started",
                            iterations=most)


def _first_use(index: RunIndex, form: str, attr: str, key: Any) -> ForkPoint:
    if not isinstance(key, str):
        raise ForkPointNotFound(f"fork point {form!r} takes a memory key (a string); "
                                f"got {key!r}", form=form)
    for ex in index.entries:
        if key in getattr(ex, attr) and (attr == "reads" or ex.outcome == "completed"):
            verb = "write" if attr == "writes" else "read"
            return _forkable(index, ex, f"the first {verb} of {key!r} ({ex.node!r})")
    verb = "wrote" if attr == "writes" else "read"
    raise ForkPointNotFound(f"no node {verb} memory key {key!r} in this run", key=key)


def point_number(at: dict[str, Any], form: str) -> int:
    """A point form's number: an int, or a string of digits (as the CLI form gives it)."""
    value = at[form]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise ForkPointNotFound(f"fork point {form!r} takes an integer; got {value!r}", form=form)


_CLI = re.compile(r"^(?P<verb>seq|before|after|iteration|first-write|first-read|version)"
                  r":(?P<arg>[^#@]+)(#(?P<occ>\d+|last))?(@(?P<run>[\w\-]+))?$")


def parse_point(text: str) -> dict[str, Any] | str:
    """The CLI form (``before:write#2``, ``seq:6``, ``seq:6@RUN``, ``human``…) as JSON."""
    text = text.strip()
    if text in ("start", "failure"):
        return text
    if text == "human":
        return {"before_human_input": True}
    match = _CLI.match(text)
    if not match:
        raise ForkPointNotFound(
            f"cannot read fork point {text!r}; use start, failure, seq:N[@RUN], "
            "before:NODE[#N|#last], after:NODE[#N|#last], iteration:N, human, "
            "first-write:KEY, first-read:KEY or version:N"
        )
    verb, arg, occ = match["verb"], match["arg"], match["occ"]
    occurrence: int | str | None = None if occ is None else (occ if occ == "last" else int(occ))
    try:
        simple: dict[str, Callable[[], dict[str, Any]]] = {
            "seq": lambda: {"sequence": int(arg),
                            **({"run_id": match["run"]} if match["run"] else {})},
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
