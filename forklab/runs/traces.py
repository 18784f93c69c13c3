"""Use case: runs from OpenTelemetry traces (SPEC §8 "In"), for the OTLP receiver.

One request's spans are stored and mapped atomically: the spans are kept (once per project,
trace and span id), each trace they belong to is re-mapped whole — from every span received
for it so far — by the engine's pure mapping, and its run's log is written in the same
transaction. Nothing is ever half-stored.

- **Idempotent**: a span already received is ignored; a trace whose mapping did not change
  leaves its run untouched.
- **Late spans**: a trace whose mapping changed has its run's log *rewritten* (the run row
  is replaced under the same id, keeping its creation time and creator). An imported run's
  log is derived data — the spans are its truth — so rewriting it is sound as long as
  nothing was derived from the old log: forking an imported run (not yet offered) must wait
  until its trace is complete, or fork from a copy.
- GenAI content sent as log events (``POST /v1/logs``) is kept per trace too and put on
  its spans whenever the trace is mapped, whichever of spans and records came first.
- The run id is a function of the project and the trace id, so each project has one run per
  trace and ``GET /api/v1/runs/?trace_id=ID`` finds it.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from forklab.engine.canonical import fingerprint
from forklab.engine.events import RunStarted
from forklab.engine.providers.pricing import PriceTable
from forklab.engine.traces import ImportedRun, Rejected, SpanRecord, map_trace, read_otlp_json
from forklab.engine.traces.langfuse import is_langfuse, read_langfuse
from forklab.engine.traces.logs import LogEvent, attach, log_from_wire
from forklab.engine.traces.otlp import span_from_wire
from forklab.runs import queries
from forklab.runs.access import User, account, require_role, signed_in
from forklab.runs.errors import NotFound
from forklab.runs.models import Project, Run, TraceLogEvent, TraceSpan
from forklab.runs.store import DjangoStore


@dataclass(frozen=True)
class TraceImport:
    """What one receive did: the runs of its traces (written or already equal), and the
    spans of the request that could not be read or mapped (OTLP ``partial_success``)."""

    runs: list[str]
    rejected: list[Rejected]

    @property
    def error_message(self) -> str:
        reasons = sorted({r.reason for r in self.rejected})
        return "; ".join(reasons)[:1000]

    def to_json(self) -> dict[str, Any]:
        """``{runs, rejected_spans, error_message}`` (CLI ``--json``, the imports API)."""
        return {"runs": list(self.runs), "rejected_spans": len(self.rejected),
                "error_message": self.error_message}


def run_id_for(project: Project, trace_id: str) -> str:
    """The id of the run a trace becomes in ``project`` (stable across re-sends)."""
    return "tr-" + fingerprint({"project": project.pk, "trace": trace_id})[:29]


def receiving_project(user: User, slug: str | None) -> Project:
    """The project a receive writes to: the named one (``X-Forklab-Project``), else the
    user's default project — the first of theirs, as the dashboard lists them. Needs the
    member role (a viewer cannot import)."""
    signed_in(user, action="importing traces")
    if slug:
        # only the user's projects: another project's name is neither confirmed nor listed
        named = queries.visible_projects(user).filter(slug=slug).first()
        if named is None:
            raise NotFound(f"no project {slug!r} among yours (X-Forklab-Project)",
                           project=slug)
        project = named
    else:
        project_or_none = queries.visible_projects(user).order_by("slug").first()
        if project_or_none is None:
            raise NotFound("you are a member of no project to import traces into; ask an "
                           "admin to add you to one, or name it in X-Forklab-Project")
        project = project_or_none
    require_role(user, project, "member", action="importing traces")
    return project


def import_document(*, user: User | None, project: Project, data: Any) -> TraceImport:
    """An OTLP JSON export or a Langfuse trace export (a file, ``POST /api/v1/imports/``)
    imported as :func:`import_spans` does; ``invalid_otlp`` when it is neither."""
    spans, unreadable = read_langfuse(data) if is_langfuse(data) else read_otlp_json(data)
    return import_spans(user=user, project=project, spans=spans, unreadable=unreadable)


def import_spans(*, user: User | None, project: Project, spans: list[SpanRecord],
                 unreadable: list[Rejected]) -> TraceImport:
    """Store ``spans`` and (re)write the runs of the traces they belong to, atomically."""
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    sent = {s.span_id for s in spans}
    rejected = list(unreadable)
    runs: list[str] = []
    with transaction.atomic():
        _lock(project)
        for trace_id in sorted(by_trace):
            TraceSpan.objects.bulk_create(
                [TraceSpan(project=project, trace_id=trace_id, span_id=s.span_id,
                           record=s.to_wire()) for s in by_trace[trace_id]],
                ignore_conflicts=True)
            imported = _remap(project, trace_id)
            if imported is not None:
                rejected.extend(r for r in imported.rejected if r.span_id in sent)
                runs.append(_write(project, user, imported))
    return TraceImport(runs=runs, rejected=rejected)


def import_log_events(*, user: User | None, project: Project, events: list[LogEvent],
                      unreadable: list[Rejected]) -> TraceImport:
    """Store GenAI log records (content sent as log events) and re-map the runs of the
    traces they belong to, atomically; a trace none of whose spans arrived yet just keeps
    them until its spans do."""
    by_trace: dict[str, list[LogEvent]] = defaultdict(list)
    for event in events:
        by_trace[event.trace_id].append(event)
    runs: list[str] = []
    with transaction.atomic():
        _lock(project)
        for trace_id in sorted(by_trace):
            TraceLogEvent.objects.bulk_create(
                [TraceLogEvent(project=project, trace_id=trace_id, span_id=e.span_id,
                               key=e.key, record=e.to_wire()) for e in by_trace[trace_id]],
                ignore_conflicts=True)
            imported = _remap(project, trace_id)
            if imported is not None:
                runs.append(_write(project, user, imported))
    return TraceImport(runs=runs, rejected=list(unreadable))


def _lock(project: Project) -> None:
    """One import at a time per project: two requests carrying spans of one trace would
    otherwise both map it and both try to create its run (PostgreSQL; SQLite's IMMEDIATE
    transactions serialize them anyway)."""
    Project.objects.select_for_update().filter(pk=project.pk).first()


def trace_spans(project: Project, trace_id: str) -> list[SpanRecord]:
    """Every span stored for a trace, with the log records stored for it put on them (what
    its run is mapped from); empty when no span arrived yet."""
    spans = [span_from_wire(r) for r in TraceSpan.objects.filter(
        project=project, trace_id=trace_id).values_list("record", flat=True)]
    if not spans:
        return []
    events = [log_from_wire(r) for r in TraceLogEvent.objects.filter(
        project=project, trace_id=trace_id).values_list("record", flat=True)]
    return attach(spans, events)


def _remap(project: Project, trace_id: str) -> ImportedRun | None:
    """The trace's run mapped from every span and log record stored for it (None: no span
    yet)."""
    spans = trace_spans(project, trace_id)
    if not spans:
        return None
    return map_trace(spans, run_id=run_id_for(project, trace_id),
                     prices=PriceTable(settings.FORKLAB_PRICES))


def _write(project: Project, user: User | None, imported: ImportedRun) -> str:
    store = DjangoStore(project, created_by=account(user))
    version = store.save_graph(imported.graph)
    first = imported.events[0]
    assert isinstance(first, RunStarted)
    events = [dataclasses.replace(first, graph_version=version), *imported.events[1:]]
    run_id = first.run_id
    existing = Run.objects.filter(pk=run_id).first()
    if existing is not None:
        if [e.to_wire() for e in store.read(run_id)] == [e.to_wire() for e in events]:
            return run_id
        created_at, created_by = existing.created_at, existing.created_by
        # its forks (one-call forks, SPEC §8 (a)) hold their own copy of what they forked
        # and stay its forks: the row's delete would set their parent to null
        forks = list(Run.objects.filter(parent_run_id=run_id).values_list("pk", flat=True))
        existing.delete()
    else:
        created_at, created_by, forks = None, account(user), []
    store.append(run_id, events, expected_seq=0)
    if forks:
        Run.objects.filter(pk__in=forks).update(parent_run_id=run_id)
    fields: dict[str, object] = {"trace_id": imported.trace_id, "created_by": created_by,
                                 "conversation_id": imported.conversation or ""}
    if created_at is not None:
        fields["created_at"] = created_at
    Run.objects.filter(pk=run_id).update(**fields)
    return run_id


__all__ = ["TraceImport", "import_log_events", "import_document", "import_spans", "receiving_project", "run_id_for", "trace_spans"]
