"""A position in a run's log as a person gives it — a run page's ``?at=``, a point share's
``seq``: the seq of one of the run's events, from 1 (after its first event) to its last
(or later, while the run still records).

Both the dashboard and the share use case read positions through here, so a damaged one is
the same ``invalid_argument`` (400) with the same words wherever it comes from.
"""

from __future__ import annotations

import re

from forklab.runs.errors import InvalidArgument
from forklab.runs.models import Run

_INTEGER = re.compile(r"-?[0-9]+")  # ASCII only: int() also takes '١٢', '1_0' and ' 1 '


def parse_seq(value: object, *, name: str) -> int:
    """``value`` (an int, or a string of ASCII digits with an optional '-') as an integer;
    anything else — a bool, a float, '1.5', 'abc', '' — is ``invalid_argument``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and len(value) <= 40 and _INTEGER.fullmatch(value):
        return int(value)
    shown = repr(value[:40]) if isinstance(value, str) else type(value).__name__
    raise InvalidArgument(f"{name}={shown} is not a seq number: a position in a run is the "
                          "seq of one of its events, a whole number from 1", field=name)


def seq_in(run: Run, seq: int, *, name: str) -> int:
    """``seq`` if ``run`` has (or, unfinished, may yet have) that event: from 1 to
    ``run.last_seq``, or past it while the run still records; else ``invalid_argument``
    saying which seqs the run has."""
    if seq >= 1 and (seq <= run.last_seq or not run.finished):
        return seq
    span = f"seq 1 to {run.last_seq}" if run.last_seq else "no events"
    where = "past the end of this run" if seq > run.last_seq else (
        "before this run's first event")
    raise InvalidArgument(f"{name}={seq} is {where}: it has {span}", field=name, seq=seq,
                          last_seq=run.last_seq)
