"""The run page's timeline: one bar per node execution, fork-point markers between them.

Built from SQL, not from a fold: the node start/end rows (no payloads) give every execution
and every boundary; only the executions on the shown page have their calls read (cost,
tokens, provenance labels), so a 10,000-event run renders one page at the price of a page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.fork.points import ForkPoint
from forklab.engine.status import ExecutionStatus
from forklab.runs import queries
from forklab.runs.models import Run
from forklab.web.bars import Bar
from forklab.web.timeline_filters import JUMPS, Filters, jump_target, load_labels, select

PAGE_SIZE = 60
ENDS: dict[str, ExecutionStatus] = {
    "node.completed": "completed", "node.failed": "failed", "node.interrupted": "interrupted"}


@dataclass
class Group:
    iteration: int
    bars: list[Bar]
    open: bool = True  # drawn unfolded (many iterations on a page fold all but one)

    @property
    def failed(self) -> int:
        return sum(1 for bar in self.bars if bar.status == "failed")


OPEN_GROUPS = 4
"""A page with more iterations than this shows only the one holding the selection unfolded."""


@dataclass(frozen=True, slots=True)
class ChosenPoint:
    """A fork point chosen on a page: its boundary seq, the execution that starts right
    after it and the one that ends at it (None past either end)."""

    seq: int
    after: Bar | None
    before: Bar | None


@dataclass
class Timeline:
    groups: list[Group]
    page: int
    pages: int
    total: int
    first_index: int
    points: list[int]
    end_point: int | None
    inherited: int
    all_bars: list[Bar] = field(default_factory=list)  # every execution; details on the page's
    filters: Filters = field(default_factory=Filters)
    shown_total: int = 0  # executions the filters keep (all of them when unfiltered)
    nodes: list[str] = field(default_factory=list)  # every node that ran, for the filter
    jumped: Bar | None = None  # the execution a jump landed on
    jump_missing: str = ""  # what a jump looked for and did not find
    compact: bool = False

    def after(self, seq: int) -> Bar | None:
        """The execution that starts right after boundary ``seq``."""
        return next((b for b in self.all_bars if b.before_point == seq), None)

    def before(self, seq: int) -> Bar | None:
        """The execution that ends at boundary ``seq``."""
        return next((b for b in self.all_bars if b.after_point == seq), None)

    def point(self, seq: int) -> ChosenPoint:
        """Boundary ``seq`` as a chosen fork point, with the executions around it."""
        return ChosenPoint(seq=seq, after=self.after(seq), before=self.before(seq))

    @property
    def bars(self) -> list[Bar]:
        return [bar for group in self.groups for bar in group.bars]


def executions(run_id: str) -> list[Bar]:
    """Every execution that counts (an interrupted attempt is superseded by its re-run)."""
    bars: list[Bar] = []
    open_: dict[str, Bar] = {}
    for seq, type_, node, occurrence, iteration, ts in queries.node_lifecycle(run_id):
        if type_ in ("node.started", "node.reused"):
            bar = Bar(node=node or "", occurrence=occurrence or 1, iteration=iteration or 1,
                      start_seq=seq, started=ts)
            bars.append(bar)
            if type_ == "node.reused":  # a served node starts and ends in one event
                bar.end_seq, bar.ended, bar.status = seq, ts, "completed"
            else:
                open_[bar.node] = bar
            continue
        ended = open_.pop(node or "", None)
        if ended is not None:
            bar = ended
            bar.end_seq, bar.ended, bar.status = seq, ts, ENDS[type_]
    return [b for b in bars if b.status != "interrupted"]


def point_label(seq: int, after: Bar | None) -> str:
    """The label of fork point ``seq`` (SPEC §4.6), ``after`` the execution starting there
    (None at the end boundary): the engine's wording, the one the API and the CLI print."""
    if after is None:
        return ForkPoint(seq=seq, node=None, occurrence=None, iteration=None, kind="end").label
    return ForkPoint(seq=seq, node=after.node, occurrence=after.occurrence,
                     iteration=after.iteration).label


def end_point(run: Run, bars: list[Bar]) -> int | None:
    """The boundary after the last node, when the run ended by running out of nodes."""
    if not run.finished or not bars:
        return None
    last = bars[-1]
    if last.status == "completed" and last.end_seq == run.last_seq - 1:
        return last.end_seq
    return None


def page_for(bars: list[Bar], seq: int | None) -> int:
    if seq is None:
        return 1
    for index, bar in enumerate(bars):
        if bar.before_point >= seq or (bar.end_seq or 0) >= seq:
            return index // PAGE_SIZE + 1
    return max(1, (len(bars) - 1) // PAGE_SIZE + 1)


def build(run: Run, *, page: int | None = None, at: int | None = None,
          kinds: Mapping[str, str] | None = None, filters: Filters | None = None,
          jump: str | None = None, compact: bool = False) -> Timeline:
    """The timeline page holding ``at`` (or ``page``, or the execution ``jump`` lands on),
    of the executions ``filters`` keep; ``kinds`` colours bars by node kind."""
    filters = filters or Filters()
    bars = executions(run.id)
    for bar in bars:
        bar.kind = (kinds or {}).get(bar.node, "")
        if bar.end_seq is None and run.status == "paused":
            bar.status = "paused"
    points = [b.before_point for b in bars]
    real_end = end_point(run, bars)
    end = None if filters.active else real_end  # its marker only shows unfiltered
    boundaries = set(points) | ({real_end} if real_end is not None else set())
    for bar in bars:
        bar.after_point = bar.end_seq if bar.end_seq in boundaries else None
    if filters.needs_labels or jump in JUMPS:
        load_labels(run.id, bars)
    kept = select(run.id, bars, filters)
    jumped = jump_target(kept, jump, is_fork=bool(run.parent_run_id)) if jump else None
    pages = max(1, (len(kept) + PAGE_SIZE - 1) // PAGE_SIZE)
    target = jumped.start_seq if jumped is not None else at
    page = min(max(1, page if page and jumped is None else page_for(kept, target)), pages)
    first = (page - 1) * PAGE_SIZE
    shown = kept[first:first + PAGE_SIZE]
    _details(run, shown)
    _scale(shown)
    inherited = max(0, len(run.path or []) - len(bars)) if run.parent_run_id else 0
    return Timeline(groups=_groups(shown, target), page=page, pages=pages, total=len(bars),
                    first_index=first, points=sorted(boundaries), end_point=end,
                    inherited=inherited, all_bars=bars, filters=filters,
                    shown_total=len(kept), nodes=sorted({b.node for b in bars}),
                    jumped=jumped, compact=compact,
                    jump_missing=_missing(jump) if jump in JUMPS and jumped is None else "")


def _missing(jump: str | None) -> str:
    return {"failed": "no execution failed or was blocked",
            "changed": "no execution ran differently from its recording"}.get(jump or "", "")


def _groups(bars: list[Bar], target: int | None = None) -> list[Group]:
    """The page's executions by iteration; past ``OPEN_GROUPS`` only the iteration holding
    ``target`` (a seq), or else the first, stays unfolded."""
    groups: list[Group] = []
    for bar in bars:
        if not groups or groups[-1].iteration != bar.iteration:
            groups.append(Group(iteration=bar.iteration, bars=[]))
        groups[-1].bars.append(bar)
    if len(groups) > OPEN_GROUPS:
        holding = next((g for g in groups if target is not None and any(
            b.before_point <= target <= (b.end_seq or b.start_seq) for b in g.bars)), groups[0])
        for group in groups:
            group.open = group is holding
    return groups


def _details(run: Run, bars: list[Bar]) -> None:
    """Cost, tokens, labels and routes of the shown executions, from their events only (a
    filtered page reads the ranges of its executions, not the log between them)."""
    if not bars:
        return
    by_seq = sorted(bars, key=lambda b: b.start_seq)
    for bar in by_seq:
        bar.labels, bar.memo, bar.blocked = [], False, False
        bar.turns = bar.tool_calls = 0
    last = max((b.end_seq or run.last_seq) for b in bars)
    ranges = [(b.start_seq, b.end_seq or run.last_seq) for b in by_seq]
    contiguous = sum(b - a + 1 for a, b in ranges) * 2 >= last - by_seq[0].start_seq + 1
    rows = (queries.action_results(run.id, by_seq[0].start_seq, last) if contiguous
            else queries.action_results_in(run.id, ranges))
    index = 0
    for seq, type_, _node, payload in rows:
        # ``<=``: a served node's calls share its ``node.reused`` seq (its start)
        while index + 1 < len(by_seq) and by_seq[index + 1].start_seq <= seq:
            index += 1
        _apply(by_seq[index], type_, payload)


def _apply(bar: Bar, type_: str, payload: dict[str, Any]) -> None:
    label = payload.get("label")
    if label and type_ != "node.completed":
        bar.labels.append(label)
    if type_ == "agent.responded":
        bar.turns += 1
        bar.tokens += int(payload.get("input_tokens", 0)) + int(payload.get("output_tokens", 0))
        cost = payload.get("cost_usd")
        if cost is None:
            bar.unpriced = True
        else:
            bar.cost_usd += float(cost)
        if payload.get("model") and payload["model"] not in bar.models:
            bar.models.append(payload["model"])
    elif type_ == "subgraph.completed":
        bar.cost_usd += float(payload.get("cost_usd") or 0)
        bar.tokens += int(payload.get("input_tokens", 0)) + int(payload.get("output_tokens", 0))
    elif type_ == "tool.returned" and payload.get("call"):
        bar.tool_calls += 1
    elif type_ == "route.decided":
        bar.route = payload.get("to")
    elif type_ == "node.completed":
        bar.memo = bool(payload.get("memo"))
    elif type_ == "effect.suppressed":
        bar.blocked = True


def _scale(bars: list[Bar]) -> None:
    """Waterfall geometry: offsets and widths in percent of the page's time span."""
    if not bars:
        return
    start = min(b.started for b in bars)
    end = max((b.ended or b.started) for b in bars)
    span = max(end - start, 1e-6)
    for bar in bars:
        bar.offset_pct = round(100 * (bar.started - start) / span, 2)
        width = 100 * ((bar.ended or end) - bar.started) / span
        room = max(100 - bar.offset_pct, 0.8)
        bar.width_pct = round(min(max(width, 0.8), room), 2)
