"""Filters and jumps for a long run's timeline: by node, kind, label, status and text; to the
first changed or first failed execution. All of it lives in the URL (``?node=&kind=&label=
&status=&q=&jump=&compact=``), so a filtered view is a permalink.

Labels of every execution come from one SQL read of the labelled events' ``label``/``memo``
fields (no payload decoded whole); text matches are a SQL search of the payloads. Both run
only when a filter or a jump needs them.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, fields
from typing import Any, Literal

from forklab.engine.status import CallLabel, ExecutionStatus
from forklab.runs import queries
from forklab.web.bars import Bar

STATUSES: tuple[ExecutionStatus, ...] = ("completed", "failed", "blocked", "running", "paused")
# the call labels, and ``memo`` for a node served whole from a memo hit
LABELS: tuple[CallLabel | Literal["memo"], ...] = (
    "live", "changed", "reused", "simulated", "blocked", "memo")
JUMPS = ("changed", "failed")
MAX_TEXT = 200


@dataclass(frozen=True)
class Filters:
    node: str = ""
    kind: str = ""
    label: str = ""
    status: str = ""
    q: str = ""

    @classmethod
    def from_query(cls, data: Any) -> Filters:
        values = {f.name: str(data.get(f.name, "") or "").strip() for f in fields(cls)}
        values["q"] = values["q"][:MAX_TEXT]
        if values["label"] not in LABELS:
            values["label"] = ""
        if values["status"] not in STATUSES:
            values["status"] = ""
        return cls(**values)

    def items(self) -> list[tuple[str, str]]:
        """``(name, value)`` of every filter (the templates carry them in hidden fields)."""
        return [(f.name, getattr(self, f.name)) for f in fields(self)]

    @property
    def active(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    @property
    def needs_labels(self) -> bool:
        return bool(self.label) or self.status == "blocked"


def _owner(bars: list[Bar], starts: list[int], seq: int) -> Bar | None:
    """The execution holding ``seq`` (bars in seq order, ``starts`` their start seqs)."""
    i = bisect_right(starts, seq) - 1
    if i < 0:
        return None
    bar = bars[i]
    return bar if bar.end_seq is None or seq <= bar.end_seq else None


def load_labels(run_id: str, bars: list[Bar]) -> None:
    """Every execution's provenance labels, memo hits and guard stops (one SQL read)."""
    starts = [b.start_seq for b in bars]
    for bar in bars:
        bar.labels, bar.memo, bar.blocked = [], False, False
    for seq, type_, label, memo in queries.label_rows(run_id):
        owner = _owner(bars, starts, seq)
        if owner is None:
            continue
        bar = owner
        if type_ == "node.completed":
            bar.memo = bool(memo)
        elif type_ == "node.reused":  # a served node: a memo hit, its calls reused
            bar.memo = True
            bar.labels.append(str(label))
        elif type_ == "effect.suppressed":
            bar.blocked = True
        elif label:
            bar.labels.append(str(label))


def _matches(bar: Bar, filters: Filters, texts: set[int]) -> bool:
    if filters.node and bar.node != filters.node:
        return False
    if filters.kind and bar.kind != filters.kind:
        return False
    if filters.status and not (bar.status == filters.status or
                               (filters.status == "blocked" and bar.blocked)):
        return False
    if filters.label and filters.label not in (bar.labels + ["memo"] * bar.memo +
                                               ["blocked"] * bar.blocked):
        return False
    return not filters.q or id(bar) in texts


def select(run_id: str, bars: list[Bar], filters: Filters) -> list[Bar]:
    """The executions the filters keep, in order."""
    if not filters.active:
        return bars
    texts: set[int] = set()
    if filters.q:
        needle = filters.q.lower()
        starts = [b.start_seq for b in bars]
        texts = {id(b) for b in bars if needle in b.node.lower()}
        for seq in queries.matching_seqs(run_id, filters.q):
            bar = _owner(bars, starts, seq)
            if bar is not None:
                texts.add(id(bar))
    return [bar for bar in bars if _matches(bar, filters, texts)]


def jump_target(bars: list[Bar], jump: str, *, is_fork: bool) -> Bar | None:
    """The first failed (or blocked) execution, or the first changed one — in a fork whose
    tail has no ``changed`` call, the first that ran for real."""
    if jump == "failed":
        return next((b for b in bars if b.status == "failed" or b.blocked), None)
    if jump == "changed":
        found = next((b for b in bars if "changed" in b.labels), None)
        if found is None and is_fork:
            found = next((b for b in bars if "live" in b.labels), None)
        return found
    return None
