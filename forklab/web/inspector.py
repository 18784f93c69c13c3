"""The state inspector: memory (and taint) at a chosen point, or the final memory."""

from __future__ import annotations

from typing import Any

from forklab.engine.graph import GraphSpec
from forklab.runs import queries
from forklab.runs.models import Run
from forklab.web.composer import pretty
from forklab.web.timeline import ChosenPoint

FOLD_FINAL_STATE_UPTO = 2000
"""Runs up to this many events show taint in the final state (a fold); longer runs show the
projected final memory and fold only when a point is chosen."""


def inspector(run: Run, at: int | None, point: ChosenPoint | None,
              graph: GraphSpec | None) -> dict[str, Any]:
    """Memory (and taint) at the chosen point, or the final memory."""
    if run.last_seq == 0 or (at is None and run.last_seq > FOLD_FINAL_STATE_UPTO):
        memory, taint, exact = dict(run.memory or {}), set(), False
    else:
        state = queries.state_at(run, at)
        memory, taint, exact = state.memory, state.taint, True
    reads: set[str] = set()
    if point and point.after is not None and graph is not None:
        reads = set(graph.node(point.after.node).reads)
    rows = []
    for key, value in sorted(memory.items()):
        text = value if isinstance(value, str) else pretty(value)
        rows.append({"key": key, "text": text, "json": not isinstance(value, str),
                     "tainted": key in taint, "read_next": key in reads, "long": len(text) > 280})
    return {"rows": rows, "at": at, "exact": exact, "tainted": sorted(taint)}
