"""The read side of one node execution (a "step"): where its events are and what they say.

A step is addressed by node and occurrence within a *logical* run: a fork's own log holds
only its tail, so an execution it inherited is found in its base's log (and so on up the
lineage). Each lookup is a couple of indexed queries on ``(run, seq)`` and ``type``; reading
a step reads only its own events, however long the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forklab.engine.reused_form import expand_all
from forklab.runs.models import Event, Run
from forklab.runs.serializers_json import iso

ENDS = ("node.completed", "node.failed", "node.interrupted")
STARTS = ("node.started", "node.reused")  # a served node starts and ends in one event
FIELDS = ("seq", "type", "node", "occurrence", "iteration", "payload", "at")
MAX_LINEAGE = 50


@dataclass(frozen=True)
class StepLocation:
    """Where an execution's events are: ``run_id``'s log, seqs ``first..last``."""

    run_id: str
    first: int
    last: int
    finished: bool
    inherited_from: str | None  # set when the run being read only inherited this step


def _ends_at(run: Run, node: str, first: int) -> tuple[int, bool]:
    end = (Event.objects.filter(run_id=run.id, type__in=ENDS, node=node, seq__gt=first)
           .order_by("seq").values_list("seq", flat=True).first())
    return (int(end), True) if end is not None else (run.last_seq, False)


def locate(run: Run, node: str, occurrence: int) -> StepLocation | None:
    """The execution ``node#occurrence`` of ``run``'s logical run, or None if it never ran.

    A node re-run after an interruption keeps its occurrence: the last attempt counts.
    """
    current: Run | None = run
    for _ in range(MAX_LINEAGE):
        if current is None:
            return None
        found = (Event.objects.filter(run_id=current.id, type__in=STARTS, node=node,
                                      occurrence=occurrence)
                 .order_by("-seq").values_list("seq", "type").first())
        if found is not None:
            first = found[0]
            last, finished = (first, True) if found[1] == "node.reused" \
                else _ends_at(current, node, first)
            return StepLocation(run_id=current.id, first=int(first), last=last,
                                finished=finished,
                                inherited_from=None if current.id == run.id else current.id)
        if not current.parent_run_id:
            return None
        current = Run.objects.filter(pk=current.parent_run_id, project=run.project).first()
    return None


def at_seq(run: Run, seq: int) -> StepLocation | None:
    """The execution of ``run``'s own log that started at ``seq`` (a ``node.started``)."""
    row = (Event.objects.filter(run_id=run.id, seq=seq, type__in=STARTS)
           .values_list("node", "type").first())
    if row is None:
        return None
    last, finished = (seq, True) if row[1] == "node.reused" \
        else _ends_at(run, row[0] or "", seq)
    return StepLocation(run_id=run.id, first=seq, last=last, finished=finished,
                        inherited_from=None)


def events(location: StepLocation) -> list[dict[str, Any]]:
    """The step's events in the Event JSON shape, by seq (a ``node.reused`` read as the
    events it stands for: ``forklab.engine.reused_form``)."""
    rows = (Event.objects.filter(run_id=location.run_id, seq__gte=location.first,
                                 seq__lte=location.last)
            .order_by("seq").values_list(*FIELDS))
    out = []
    for row in rows:
        event = dict(zip(FIELDS, row, strict=True))
        event["at"] = iso(event["at"])
        out.append(event)
    return expand_all(out)
