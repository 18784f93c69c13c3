"""Where a fork really starts and what is applied there (SPEC §3.2 forks of forks, §3.3).

Given the requested point P in the base's logical run and the request's changes:

- *the holder*: P lies in the log of some run H of the base's lineage. If H is an ancestor of
  the base, forking there is forking H at P with the changes of every run after H (in lineage
  order) re-applied at P, then the request's: ``fork(F, P, c2) ≡ fork(root, P, c1 + c2)``.
  Config-type changes are already in the base's effective graph; state-type ones are applied
  at P. Node-level changes of the whole lineage stay active in the tail.
- *input patches*: ``input_patch`` means "the run had started with this input". Let K be the
  input keys whose value changes (against H's input). If a node before P declared a read of
  a key in K — present or absent when recorded — P moves to before the first such node (and
  the holder is recomputed there); memoization is then forced on so unchanged calls reuse
  their recordings. At the effective point a key of K is written only if no node before it
  wrote or deleted it (a node that overwrote it keeps its value).
- later changes replace earlier ones that write the same thing (a refinement): the changes
  are applied in lineage order, the request's last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forklab.engine.canonical import canonical_json, merge_patch
from forklab.engine.fork.changes import Change, InputPatchChange, MemoryChange
from forklab.engine.fork.points import ForkPoint
from forklab.engine.fork.resolve import forkable

if TYPE_CHECKING:
    from forklab.engine.fork.base import BaseRun

DELETE = object()
"""Marks a key the fork deletes at its point (in :meth:`Application.writes`)."""


def changed_input_keys(old: dict[str, Any], new: dict[str, Any]) -> set[str]:
    """Top-level input keys whose value differs between two inputs."""
    keys = set(old) | set(new)
    return {k for k in keys if canonical_json(old.get(k)) != canonical_json(new.get(k))}


@dataclass(frozen=True)
class Reader:
    """A node before the requested point that read a patched input key."""

    node: str
    occurrence: int
    keys: tuple[str, ...]
    point: ForkPoint


@dataclass
class Application:
    """The effective point and everything applied there."""

    requested: ForkPoint
    point: ForkPoint
    holder_input: dict[str, Any]
    reapplied: list[Change]
    own: list[Change]
    new_input: dict[str, Any]
    changed: set[str]
    overwritten: dict[str, str] = field(default_factory=dict)  # key -> node that wrote it
    readers: list[Reader] = field(default_factory=list)

    @property
    def moved(self) -> bool:
        return bool(self.readers)

    @property
    def applied(self) -> list[Change]:
        """Changes applied at the point, in order (``change.applied`` events)."""
        return [*self.reapplied, *self.own]

    @property
    def written_inputs(self) -> set[str]:
        """Input keys the patch writes at the point (K minus keys a prefix node wrote)."""
        return self.changed - set(self.overwritten)

    def writes(self) -> list[tuple[str, Any]]:
        """Memory writes at the point, in order: ``(key, value)`` or ``(key, DELETE)``."""
        out: list[tuple[str, Any]] = []
        current = dict(self.holder_input)
        for item in self.applied:
            if isinstance(item, InputPatchChange):
                after = merge_patch(current, item.patch)
                for key in sorted(changed_input_keys(current, after) & self.written_inputs):
                    out.append((key, after.get(key, DELETE)))
                current = after
            elif isinstance(item, MemoryChange):
                out += [(key, DELETE) for key in item.delete]
                out += list(item.set.items())
        return out

    def warnings(self) -> list[str]:
        """What the result says about a moved point and keys a prefix node overwrote."""
        lines = []
        if self.moved:
            first = self.readers[-1]
            read = "; ".join(f"{r.node!r} (execution {r.occurrence}) read "
                             f"{', '.join(repr(k) for k in r.keys)}" for r in self.readers)
            lines.append(
                f"the fork point moved from seq {self.requested.seq} ({self.requested.label}) "
                f"to seq {first.point.seq} ({first.point.label}): the input patch changes "
                f"{sorted(self.changed)} and {read} before the requested point; unchanged "
                "calls reuse their recordings (memoize is on)")
        for key, node in sorted(self.overwritten.items()):
            if key in self.changed:
                lines.append(f"input key {key!r} was overwritten by {node!r} before the fork "
                             "point, which keeps that node's value")
        return lines


def _patched(start: dict[str, Any], changes: Sequence[Change]) -> dict[str, Any]:
    for item in changes:
        if isinstance(item, InputPatchChange):
            start = merge_patch(start, item.patch)
    return start


def _holder_changes(base: BaseRun, point: ForkPoint) -> tuple[dict[str, Any], list[Change]]:
    """(the holder's input, the changes of every run after it in the lineage)."""
    holder = point.run_id or base.run_id
    links = base.lineage.after(holder)
    state = base.lineage.links[base.lineage.index_of(holder)].state
    holder_input = dict(state.input) if state is not None else dict(base.state.input)
    return holder_input, [c for link in links for c in link.own_changes()]


def _readers(base: BaseRun, point: ForkPoint, keys: set[str]) -> Reader | None:
    """The first execution before ``point`` declaring a read of one of ``keys`` (the node
    a call-level point stands inside read its slice before the point, so it counts)."""
    inside = 1 if point.call is not None else 0
    for entry in base.index.entries[:(point.position or 0) + inside]:
        read = tuple(k for k in entry.reads if k in keys)
        if read:
            what = f"execution {entry.occurrence} of {entry.node!r}"
            return Reader(entry.node, entry.occurrence, read, forkable(base.index, entry, what))
    return None


def apply_at(base: BaseRun, requested: ForkPoint, own: Sequence[Change]) -> Application:
    """The effective point of a fork of ``base`` at ``requested`` with ``own`` changes."""
    point, readers = requested, []
    while True:
        holder_input, reapplied = _holder_changes(base, point)
        new_input = _patched(holder_input, [*reapplied, *own])
        changed = changed_input_keys(holder_input, new_input)
        reader = _readers(base, point, changed) if changed else None
        if reader is None:
            break
        readers.append(reader)
        point = reader.point
    overwritten: dict[str, str] = {}
    for entry in base.index.entries[:point.position or 0]:
        if entry.outcome == "completed":
            for key in entry.writes & changed:
                overwritten[key] = entry.node
    return Application(requested=requested, point=point, holder_input=holder_input,
                       reapplied=reapplied, own=list(own), new_input=new_input,
                       changed=changed, overwritten=overwritten, readers=readers)
