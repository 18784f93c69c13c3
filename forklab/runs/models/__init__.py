"""forklab's tables. The event log (``Event``) is the truth; ``Run`` columns are a projection
cache of the folded state, maintained by :class:`forklab.runs.store.DjangoStore`."""

from forklab.runs.models.access import Membership, Project, Role, ShareLink
from forklab.runs.models.cases import Case, ForkRequest
from forklab.runs.models.graphs import Graph, GraphVersion
from forklab.runs.models.runs import (
    Event,
    FinalState,
    ForkResult,
    Run,
    RunKind,
    RunStatus,
    Snapshot,
    UsageRecord,
)
from forklab.runs.models.traces import TraceBacklog, TraceLogEvent, TraceSpan

__all__ = [
    "Case", "Event", "ForkRequest", "Graph", "GraphVersion", "Membership", "Project", "Role",
    "FinalState", "ForkResult", "Run", "RunKind", "RunStatus", "ShareLink", "Snapshot", "TraceBacklog", "TraceLogEvent", "TraceSpan",
    "UsageRecord",
]
