"""Resolving a fork-point address in a run's logical run (SPEC §3.2).

Every form resolves to one :class:`~forklab.engine.fork.points.ForkPoint` of a
:class:`~forklab.engine.fork.points.RunIndex`, or raises an error naming the real cause: an
unknown node lists the nodes that ran, an out-of-range occurrence says how many executions
there were, a seq inside a node names it (``fork_point_mid_node``), an execution behind a
compaction boundary names the earliest forkable point, one in an archived log is
``source_missing``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from forklab.engine.calls import looks_like_call_key, parse_call_key
from forklab.engine.errors import (
    ForkPointMidNode,
    ForkPointNotFound,
    PointCompacted,
    SourceMissing,
)
from forklab.engine.fork.points import Entry, ForkPoint, RunIndex


def earliest_context(index: RunIndex) -> dict[str, Any]:
    """What an error says of the earliest forkable point: its seq and, when an ancestor's log
    holds it, that run (``seq:N@RUN`` addresses it)."""
    first = index.earliest_point()
    if first is None:
        return {"earliest_forkable": None}
    if first.run_id in (None, index.run_id):
        return {"earliest_forkable": first.seq}
    return {"earliest_forkable": first.seq, "earliest_forkable_run_id": first.run_id}


def forkable(index: RunIndex, entry: Entry, what: str) -> ForkPoint:
    """The entry's point, or why it cannot be forked (compacted, archived, deleted). The
    earliest forkable point an error names is one that forks (:meth:`RunIndex.points`)."""
    if entry.missing is None:
        return entry.point()
    earliest = index.earliest_text()
    if entry.missing == "compacted":
        own = entry.run_id == index.run_id  # a snapshot of this run's log may cover it
        raise PointCompacted(
            f"{what} is behind the compaction boundary of run {entry.run_id!r} (its events "
            f"are gone); the earliest forkable point is {earliest}"
            + (", or fork a snapshot (source='auto' finds one taken at that boundary or "
               "inside its node; source='snapshot' with at={'version': N})" if own else ""),
            point=entry.point(), node=entry.node, **earliest_context(index))
    gone = "deleted" if entry.missing == "deleted" else "archived (its events are gone)"
    if index.earliest_point() is None:
        raise SourceMissing(
            f"{what} is in the log of run {entry.run_id!r}, which was {gone}, and no boundary "
            "of this run is left to fork from its events; fork a snapshot instead "
            "(source='snapshot', at={'version': N})", run_id=entry.run_id)
    raise SourceMissing(
        f"{what} is in the log of run {entry.run_id!r}, which was {gone}; fork a later point "
        f"(the earliest forkable point is {earliest})",
        run_id=entry.run_id, **earliest_context(index))


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
        raise ForkPointNotFound(
            f"execution {occurrence} of node {node!r} is not in this log (it starts at "
            f"execution {runs[0].occurrence}); the earliest forkable point is "
            f"{index.earliest_text()}",
            node=node, executions=executions, **earliest_context(index),
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
            return forkable(index, entry, f"seq {seq}")
    if seq < index.first_seq - 1 or seq < 1:
        raise ForkPointNotFound(
            f"seq {seq} is before the earliest forkable point ({index.earliest_text()}); "
            f"events before seq {index.first_seq} are not available",
            seq=seq, **earliest_context(index),
        )
    for ex in index.own:
        if ex.start <= seq and (ex.end is None or seq < ex.end):
            raise ForkPointMidNode(
                f"seq {seq} is inside the execution of node {ex.node!r} (execution "
                f"{ex.occurrence}, seqs {ex.start}..{ex.end}); {_around(index, ex)}",
                seq=seq, node=ex.node, occurrence=ex.occurrence,
            )
    raise ForkPointNotFound(
        f"seq {seq} is not a node boundary of this run (last seq {index.last_seq}); list the "
        "run's fork points (manage.py forkpoints RUN, or GET /api/v1/runs/RUN/fork-points/) "
        "and give one of their seqs",
        seq=seq,
    )


def _around(index: RunIndex, ex: Any) -> str:
    """The boundaries before and after an execution that fork (a boundary behind a
    compaction boundary, or after a node that did not complete, is not one), else the
    earliest forkable point."""
    before = index.point_at(ex.start - 1)
    after = index.point_at(ex.end) if ex.end is not None else None
    named = [f"seq {p.seq} ({where})" for p, where in ((before, "before it"),
                                                        (after, "after it")) if p is not None]
    if named:
        return "fork at " + " or ".join(named)
    return f"fork at the earliest forkable point, {index.earliest_text()}"


def _inherited_sequence(index: RunIndex, seq: int, run_id: str) -> ForkPoint:
    held = [e for e in index.entries if e.run_id == run_id]
    for entry in held:
        if entry.start - 1 == seq:
            return forkable(index, entry, f"seq {seq} of run {run_id!r}")
    holders = list(dict.fromkeys(e.run_id for e in index.entries))
    raise ForkPointNotFound(
        f"seq {seq} of run {run_id!r} is not a boundary of this run's logical run; it holds "
        + (f"seqs {', '.join(str(e.start - 1) for e in held)} of that run" if held else
           f"no execution of that run (runs: {', '.join(holders)})"),
        seq=seq, run_id=run_id)


def _at_position(index: RunIndex, position: int, what: str) -> ForkPoint:
    if position < len(index.entries):
        return forkable(index, index.entries[position], what)
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
        return forkable(index, index.entries[0], "the start of the run")
    if at == "failure":
        failed = [e for e in index.entries if e.outcome == "failed"]
        if not failed:
            raise ForkPointNotFound(
                f"the run is {status} and no node failed; choose another fork point",
                status=status,
            )
        return forkable(index, failed[-1], f"the failed node {failed[-1].node!r}")
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
        return forkable(index, ex, f"execution {ex.occurrence} of {ex.node!r}")
    if "before_call" in at:
        return call_point(index, at["before_call"])
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
                return forkable(index, ex, f"the approval gate {ex.node!r}")
        raise ForkPointNotFound("no approval gate ran in this run")
    raise ForkPointNotFound(
        f"unrecognised fork point {at!r}; expected one of start, failure, sequence, "
        "before_node, after_node, before_iteration, before_human_input, "
        "before_first_write_of, before_first_read_of, version"
    )


def call_point(index: RunIndex, key: str) -> ForkPoint:
    """The point before call ``key`` (``assist#1/turn:3``, ``assist#1/turn:1/tool:2``, or the
    alias ``assist#1/tool:<provider call id>``) in the logical run (SPEC §6.2)."""
    address = parse_call_key(key)
    if address is None:
        raise ForkPointNotFound(
            f"fork point before_call: cannot read call key {key!r}; expected NODE#N/turn:T "
            "or NODE#N/turn:T/tool:K (or NODE#N/tool:<provider call id>)", call=key)
    entry = _occurrence(index, address.node, address.occurrence)
    part = address.call
    if address.tool_id is not None:
        part = next((p for p, call_id in entry.calls if call_id == address.tool_id), "")
    parts = [p for p, _ in entry.calls]
    if part not in parts:
        listed = ", ".join(parts[:12]) + (" …" if len(parts) > 12 else "")
        raise ForkPointNotFound(
            f"execution {entry.occurrence} of {entry.node!r} made no call {key!r}; its calls: "
            f"{listed or 'none'}", call=key, node=entry.node, calls=parts)
    point = forkable(index, entry, f"call {key!r}")
    return point if part == parts[0] else entry.call_point(part)


def _iteration(index: RunIndex, n: int) -> ForkPoint:
    for ex in index.entries:
        if ex.iteration == n:
            return forkable(index, ex, f"iteration {n}")
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
            return forkable(index, ex, f"the first {verb} of {key!r} ({ex.node!r})")
    verb = "wrote" if attr == "writes" else "read"
    raise ForkPointNotFound(f"no node {verb} memory key {key!r} in this run", key=key)


def _is_number(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value) is not None)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


_NUMBER = (_is_number, "an integer")
_NAME = (_is_name, "a non-empty string")
_OCCURRENCE = (lambda v: v == "last" or (_is_number(v) and int(v) >= 1),
               'an integer from 1, or "last"')
#: each object form's key, what its value is, and the optional keys it may carry
POINT_FORMS: dict[str, tuple[tuple[Callable[[Any], bool], str], dict[str, Any]]] = {
    "sequence": (_NUMBER, {"run_id": (_is_name, "a run id")}),
    "before_node": (_NAME, {"occurrence": _OCCURRENCE}),
    "before_call": (_NAME, {}),
    "after_node": (_NAME, {"occurrence": _OCCURRENCE}),
    "before_iteration": (_NUMBER, {}),
    "before_human_input": ((lambda v: v is True, "true"), {}),
    "before_first_write_of": (_NAME, {}),
    "before_first_read_of": (_NAME, {}),
    "version": (_NUMBER, {}),
}


def point_problem(at: dict[str, Any]) -> tuple[str, str] | None:
    """What is wrong with the shape of an object fork point, as (key, what was expected), or
    None: exactly one form key, only that form's optional keys, each value of its type
    (SPEC §3.2). Whether the point exists in a run is :func:`resolve_point`'s question."""
    forms = [k for k in at if k in POINT_FORMS]
    if len(forms) != 1:
        listed = ", ".join(POINT_FORMS)
        return ("", f"exactly one of {listed}; got {', '.join(forms) or 'none'}")
    form = forms[0]
    (check, expected), optional = POINT_FORMS[form]
    for key in at:
        if key != form and key not in optional:
            allowed = ", ".join(optional) or "none"
            return (key, f"no other key with {form!r} (optional: {allowed})")
    if not check(at[form]):
        return (form, f"{expected}, got {json.dumps(at[form])[:60]}")
    for key, (check, expected) in optional.items():
        if key in at and not check(at[key]):
            return (key, f"{expected}, got {json.dumps(at[key])[:60]}")
    return None


def check_point(at: Any) -> None:
    """Raise ``fork_point_not_found`` for an object fork point of the wrong shape."""
    problem = point_problem(at) if isinstance(at, dict) else None
    if problem is not None:
        key, expected = problem
        raise ForkPointNotFound(f"fork point {'.'.join(('at', key)) if key else 'at'}: "
                                f"expected {expected}", field=f"at.{key}" if key else "at")


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
    if text.startswith("before:") and looks_like_call_key(text[len("before:"):]):
        return {"before_call": text[len("before:"):]}
    match = _CLI.match(text)
    if not match:
        raise ForkPointNotFound(
            f"cannot read fork point {text!r}; use start, failure, seq:N[@RUN], "
            "before:NODE[#N|#last], before:NODE#N/turn:T[/tool:K], after:NODE[#N|#last], "
            "iteration:N, human, "
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
