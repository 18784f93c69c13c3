"""What the diff page shows of a RunDiff: the aligned path folded and paged, the strip around
the first divergence, the tail's calls (grouped when many) and the memory deltas as text.

Pure presentation over the engine's wire models (:mod:`forklab.engine.fork.wire`): nothing
here reads a run; the values are the typed diff the read side carries.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.safestring import SafeString

from forklab.engine.fork.wire import AlignedStep, CallWire, MemoryDelta, PathEntry
from forklab.web.textdiff import as_text, pieces_html, similarity, word_diff

CONTEXT_STEPS = 2
"""Unchanged steps shown on each side of a change; longer unchanged stretches fold."""
STEPS_PER_PAGE = 120
STRIP_STEPS = 40
"""The path strip shows this many steps, centred on the first divergence."""
CALLS_LISTED = 40
"""Up to this many tail calls are listed one by one; more are grouped by node and label."""


@dataclass(frozen=True, slots=True)
class PathRow:
    """One aligned step with its index in the path (``not_reached``: a base step the
    variant, stopped early, never got to)."""

    index: int
    op: str
    base: PathEntry | None
    variant: PathEntry | None
    not_reached: bool

    @classmethod
    def of(cls, index: int, step: AlignedStep) -> PathRow:
        return cls(index=index, op=step.op, base=step.base, variant=step.variant,
                   not_reached=bool(step.not_reached))


@dataclass(frozen=True, slots=True)
class Fold:
    """A folded stretch of ``fold`` steps: unchanged ones, or (all ``not_reached``) steps
    the variant never reached."""

    fold: int
    not_reached: bool


@dataclass(frozen=True, slots=True)
class StepsPage:
    """One page of the path table; ``next``/``prev`` are the row offsets of its neighbours."""

    rows: list[PathRow | Fold]
    start: int
    total_rows: int
    next: int | None
    prev: int | None


@dataclass(frozen=True, slots=True)
class Strip:
    """A window of the aligned path: ``before`` and ``after`` steps are left out."""

    steps: list[PathRow]
    before: int
    after: int
    divergence: int | None


@dataclass(slots=True)
class CallGroup:
    """Tail calls of one node, role, kind, label and model, summed (None cost: unpriced)."""

    node: str
    role: str | None
    kind: str
    label: str
    model: str | None
    count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0

    def add(self, call: CallWire) -> None:
        self.count += 1
        self.input_tokens += call.input_tokens
        self.output_tokens += call.output_tokens
        self.cost_usd = (None if call.cost_usd is None or self.cost_usd is None
                         else self.cost_usd + call.cost_usd)


@dataclass(frozen=True, slots=True)
class CallList:
    rows: list[CallWire] | list[CallGroup]
    grouped: bool
    total: int


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """A memory key's delta as text; a changed value also word by word and how alike."""

    key: str
    op: str
    bytes_delta: int
    taint_moved: bool
    base_text: str
    variant_text: str
    json: bool
    diff_html: SafeString | None = None
    similarity: int | None = None

    @classmethod
    def of(cls, key: str, delta: MemoryDelta) -> MemoryRow:
        shown = delta.base if delta.op == "removed" else delta.variant
        changed = delta.op == "changed"
        return cls(key=key, op=delta.op, bytes_delta=delta.bytes_delta,
                   taint_moved=delta.taint_moved, base_text=as_text(delta.base),
                   variant_text=as_text(delta.variant), json=not isinstance(shown, str),
                   diff_html=pieces_html(word_diff(delta.base, delta.variant)) if changed
                   else None,
                   similarity=round(100 * similarity(delta.base, delta.variant)) if changed
                   else None)


def path_strip(aligned: list[AlignedStep], divergence: int | None) -> Strip:
    """A window of the aligned path around the first divergence (the start when none)."""
    centre = divergence or 0
    start = max(0, min(centre - STRIP_STEPS // 2, len(aligned) - STRIP_STEPS))
    end = min(len(aligned), start + STRIP_STEPS)
    return Strip(steps=[PathRow.of(i, aligned[i]) for i in range(start, end)], before=start,
                 after=len(aligned) - end, divergence=divergence)


def fold_steps(aligned: list[AlignedStep], *, start: int | None = None) -> StepsPage:
    """The aligned path for display: unchanged stretches folded to a count, one page long."""
    keep = [len(aligned) <= 2 * CONTEXT_STEPS + 1] * len(aligned)
    for i, step in enumerate(aligned):
        if step.op != "same" and not step.not_reached:
            for j in range(max(0, i - CONTEXT_STEPS), min(len(aligned), i + CONTEXT_STEPS + 1)):
                keep[j] = True
    rows: list[PathRow | Fold] = []
    folded: list[AlignedStep] = []

    def fold() -> None:
        if folded:  # one row for a stretch: unchanged steps, or steps the variant never reached
            rows.append(Fold(fold=len(folded),
                             not_reached=all(step.not_reached for step in folded)))
            folded.clear()

    for i, step in enumerate(aligned):
        if keep[i]:
            fold()
            rows.append(PathRow.of(i, step))
        else:
            folded.append(step)
    fold()
    start = max(0, start or 0)
    return StepsPage(
        rows=rows[start:start + STEPS_PER_PAGE], start=start, total_rows=len(rows),
        next=start + STEPS_PER_PAGE if start + STEPS_PER_PAGE < len(rows) else None,
        prev=max(0, start - STEPS_PER_PAGE) if start else None)


def step_counts(aligned: list[AlignedStep]) -> dict[str, int]:
    """How many steps of each op (``not_reached`` apart from the skips it is)."""
    counts = {"same": 0, "changed": 0, "inserted": 0, "skipped": 0, "not_reached": 0}
    for step in aligned:
        counts["not_reached" if step.not_reached else step.op] += 1
    return counts


def call_list(calls: list[CallWire], *, every: bool) -> CallList:
    """The tail's calls one by one, or grouped when there are many (unless ``every``)."""
    if every or len(calls) <= CALLS_LISTED:
        return CallList(rows=calls, grouped=False, total=len(calls))
    groups: dict[tuple[str, str | None, str, str, str | None], CallGroup] = {}
    for call in calls:
        key = (call.node, call.role, call.kind, call.label, call.model)
        groups.setdefault(key, CallGroup(*key)).add(call)
    return CallList(rows=list(groups.values()), grouped=True, total=len(calls))
