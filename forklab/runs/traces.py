"""Use case: runs from OpenTelemetry traces (SPEC §8 "In"), for the OTLP receiver.

A request's spans are stored (once per project, trace and span id) and each trace they
extend is re-mapped whole — from every span received for it so far — by the engine's pure
mapping; its run's log is written in the same transaction. Nothing is ever half-stored.

- **Idempotent**: a request that adds no span to a trace re-maps nothing (a re-send); a
  trace whose mapping did not change leaves its run untouched.
- **Late spans**: a trace whose mapping changed has its run's log *rewritten* (the run row
  is replaced under the same id, keeping its creation time and creator). An imported run's
  log is derived data — the spans are its truth — so rewriting it is sound as long as
  nothing was derived from the old log: forking an imported run (not yet offered) must wait
  until its trace is complete, or fork from a copy.
- **Large traces** (the receiver, ``defer``): a trace that already holds
  ``FORKLAB_TRACE_INLINE_SPANS`` spans is re-mapped by a background task
  (:func:`remap_trace`) once per ``FORKLAB_TRACE_REMAP_DELAY``, however many requests
  extend it — not once per request, which costs O(n²) for a trace sent a span at a time.
  Its run lags its spans until then; a run behind its spans (its ``trace.imported`` counts
  fewer than are stored: a re-map pending or lost with its process) is caught up by the
  next request for the trace.
- **Back-pressure**: one import at a time per process; a request that waited
  ``FORKLAB_OTLP_WAIT`` seconds is refused ``throttled`` (429 with ``Retry-After``, which
  exporters retry) with nothing stored.
- GenAI content sent as log events (``POST /v1/logs``) is kept per trace too and put on
  its spans whenever the trace is mapped, whichever of spans and records came first.
- The run id is a function of the project and the trace id, so each project has one run per
  trace and ``GET /api/v1/runs/?trace_id=ID`` finds it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.tasks import task

from forklab.engine.canonical import fingerprint
from forklab.engine.errors import ForklabError
from forklab.engine.events import RunStarted, TraceImported
from forklab.engine.providers.pricing import PriceTable
from forklab.engine.traces import ImportedRun, Rejected, SpanRecord, map_trace, read_otlp_json
from forklab.engine.traces.langfuse import is_langfuse, read_langfuse
from forklab.engine.traces.logs import LogEvent, attach, log_from_wire
from forklab.engine.traces.mapping import observe
from forklab.engine.traces.otlp import span_from_wire
from forklab.runs import queries
from forklab.runs.access import User, account, require_role, signed_in
from forklab.runs.errors import NotFound
from forklab.runs.models import Event, Project, Run, TraceLogEvent, TraceSpan
from forklab.runs.store import DjangoStore


class ReceiverBusy(ForklabError):
    """The receiver has been importing other requests for longer than
    ``FORKLAB_OTLP_WAIT`` seconds: retry later (OTLP's back-pressure, ``429`` with
    ``Retry-After``, which exporters honour)."""

    code = "throttled"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, retry_after=retry_after)
        self.retry_after = retry_after


# One import at a time in this process: requests queue here (and answer 429 when the wait
# is too long) rather than on the database's write lock, whose timeout is a 500 on SQLite
_importing = threading.Lock()


@contextmanager
def _one_import() -> Iterator[None]:
    wait = settings.FORKLAB_OTLP_WAIT
    if not _importing.acquire(timeout=wait):
        raise ReceiverBusy(f"the trace receiver has been busy for {wait:g} s importing other "
                           "requests; retry later (nothing of this request was stored)",
                           retry_after=max(1, round(wait / 4)))
    try:
        yield
    finally:
        _importing.release()


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
    imported as :func:`import_spans` does (every trace mapped before it returns);
    ``invalid_otlp`` when it is neither."""
    spans, unreadable = read_langfuse(data) if is_langfuse(data) else read_otlp_json(data)
    return import_spans(user=user, project=project, spans=spans, unreadable=unreadable)


def import_spans(*, user: User | None, project: Project, spans: list[SpanRecord],
                 unreadable: list[Rejected], defer: bool = False) -> TraceImport:
    """Store ``spans`` and (re)write the runs of the traces they belong to, atomically.

    A trace to which the request adds no span is not re-mapped (unless its run is behind
    its spans: a deferred re-map lost with its process). With ``defer`` (the OTLP
    receiver), a trace that already held ``FORKLAB_TRACE_INLINE_SPANS`` spans before this
    request is re-mapped in the background (:func:`remap_trace`) rather than here, so a
    large trace sent a span at a time costs one re-map per delay, not one per request; its
    run is named in the answer all the same (its id is a function of the trace).
    """
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    rejected = list(unreadable)
    for span in {s.span_id: s for s in spans}.values():  # what the mapping rejects
        found = observe(span)
        if isinstance(found, str):
            rejected.append(Rejected(span.span_id, span.name, found))
    runs: list[str] = []
    with _one_import(), transaction.atomic():
        _lock(project)
        known, counts = _stored(project, by_trace)
        writer = _Writer(project, user)
        for trace_id in sorted(by_trace):
            held = counts.get(trace_id, 0)
            new = {s.span_id: s for s in by_trace[trace_id]
                   if s.span_id not in known[trace_id]}
            if new:
                TraceSpan.objects.bulk_create(
                    [TraceSpan(project=project, trace_id=trace_id, span_id=s.span_id,
                               record=s.to_wire()) for s in new.values()],
                    ignore_conflicts=True)
            elif not _behind(project, trace_id, held):
                runs.append(run_id_for(project, trace_id))  # a re-send: nothing changed
                continue
            if defer and held >= max(1, settings.FORKLAB_TRACE_INLINE_SPANS):
                _schedule(project, trace_id)
                runs.append(run_id_for(project, trace_id))
                continue
            imported = _remap(project, trace_id)
            if imported is not None:
                runs.append(writer.write(imported, compare=not new))
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
    with _one_import(), transaction.atomic():
        _lock(project)
        writer = _Writer(project, user)
        for trace_id in sorted(by_trace):
            TraceLogEvent.objects.bulk_create(
                [TraceLogEvent(project=project, trace_id=trace_id, span_id=e.span_id,
                               key=e.key, record=e.to_wire()) for e in by_trace[trace_id]],
                ignore_conflicts=True)
            imported = _remap(project, trace_id)
            if imported is not None:
                runs.append(writer.write(imported))
    return TraceImport(runs=runs, rejected=list(unreadable))


def _lock(project: Project) -> None:
    """One import at a time per project: two requests carrying spans of one trace would
    otherwise both map it and both try to create its run (PostgreSQL; SQLite's IMMEDIATE
    transactions serialize them anyway)."""
    Project.objects.select_for_update().filter(pk=project.pk).first()


def _stored(project: Project, by_trace: dict[str, list[SpanRecord]]
            ) -> tuple[dict[str, set[str]], dict[str, int]]:
    """Of each trace in ``by_trace``: which of its spans here are stored already, and how
    many spans it has stored (two indexed queries, whatever the traces' sizes)."""
    known: dict[str, set[str]] = defaultdict(set)
    sent = [s.span_id for spans in by_trace.values() for s in spans]
    for trace_id, span_id in TraceSpan.objects.filter(
            project=project, trace_id__in=list(by_trace), span_id__in=sent
    ).values_list("trace_id", "span_id"):
        known[trace_id].add(span_id)
    counts = dict(TraceSpan.objects.filter(project=project, trace_id__in=list(by_trace))
                  .values("trace_id").annotate(n=Count("id")).values_list("trace_id", "n"))
    return known, counts


def _mapped_spans(project: Project, trace_ids: list[str]) -> dict[str, int]:
    """How many spans each trace's run was mapped from (its ``trace.imported`` count)."""
    runs = {run_id_for(project, t): t for t in trace_ids}
    rows = Event.objects.filter(run_id__in=list(runs), seq=2, type=TraceImported.TYPE
                                ).values_list("run_id", "payload")
    return {runs[run_id]: int(payload.get("spans", 0)) for run_id, payload in rows}


def _behind(project: Project, trace_id: str, stored: int) -> bool:
    """True when the trace's run was mapped from fewer spans than are stored (or is
    missing): a deferred re-map has not happened (yet, or its process died)."""
    return bool(stored) and _mapped_spans(project, [trace_id]).get(trace_id) != stored


def unmapped_traces(project: Project) -> list[str]:
    """The project's traces whose run does not reflect every stored span yet: the
    receiver's backlog of deferred re-maps (benchmarks and tests watch it)."""
    stored = dict(TraceSpan.objects.filter(project=project).values("trace_id")
                  .annotate(n=Count("id")).values_list("trace_id", "n"))
    mapped = _mapped_spans(project, list(stored))
    return sorted(t for t, n in stored.items() if mapped.get(t) != n)


# (project id, trace id) of the re-maps this process has scheduled and not started: a
# burst of requests extending one trace schedules it once
_scheduled: set[tuple[int, str]] = set()
_scheduled_lock = threading.Lock()


def _schedule(project: Project, trace_id: str) -> None:
    """Re-map ``trace_id`` in the background once this transaction commits (once per
    burst: a trace already scheduled and not started is not scheduled again)."""
    key = (project.pk, trace_id)
    due = time.time() + settings.FORKLAB_TRACE_REMAP_DELAY

    def enqueue() -> None:
        with _scheduled_lock:
            if key in _scheduled:
                return
            _scheduled.add(key)
        try:
            remap_trace.enqueue(project.pk, trace_id, due)
        except Exception:
            with _scheduled_lock:
                _scheduled.discard(key)
            raise

    transaction.on_commit(enqueue)


@task
def remap_trace(project_id: int, trace_id: str, due: float) -> str:
    """A deferred re-map (:func:`import_spans` with ``defer``): at ``due`` (a POSIX time:
    the requests of the next delay's worth are coalesced into this one), map the trace from
    every span stored by then and write its run, atomically. Idempotent: a run already
    up to date is left alone."""
    time.sleep(max(0.0, due - time.time()))
    with _scheduled_lock:  # from here on, a new span schedules another re-map
        _scheduled.discard((project_id, trace_id))
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return "skipped: the project is gone"
    with _importing, transaction.atomic():  # a task waits its turn, however long
        _lock(project)
        stored = TraceSpan.objects.filter(project=project, trace_id=trace_id).count()
        if not _behind(project, trace_id, stored):
            return "skipped: the run is up to date"
        imported = _remap(project, trace_id)
        if imported is None:
            return "skipped: no span"
        return _Writer(project, None).write(imported, compare=False)


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


class _Writer:
    """Writes mapped traces' runs for one request or task: the synthetic graphs it saves
    are remembered (the traces of one app share a graph, saved once, not once per trace)."""

    def __init__(self, project: Project, user: User | None) -> None:
        self.project, self.user = project, user
        self.store = DjangoStore(project, created_by=account(user))
        self.versions: dict[tuple[str, str], int] = {}

    def write(self, imported: ImportedRun, *, compare: bool = True) -> str:
        """Write ``imported``'s run (rewrite it when it exists). ``compare``: leave the run
        as it is when its log already equals the mapping (a caller that knows the mapping
        changed — the trace gained a span, so ``trace.imported`` counts one more — skips
        reading it)."""
        graph = imported.graph
        key = (graph.id, graph.content_hash)
        if key not in self.versions:
            self.versions[key] = self.store.save_graph(graph)
        first = imported.events[0]
        assert isinstance(first, RunStarted)
        events = [dataclasses.replace(first, graph_version=self.versions[key]),
                  *imported.events[1:]]
        run_id = first.run_id
        existing = Run.objects.filter(pk=run_id).first()
        if existing is not None:
            if compare and [e.to_wire() for e in self.store.read(run_id)] == [
                    e.to_wire() for e in events]:
                return run_id
            created_at, created_by = existing.created_at, existing.created_by
            # its forks (one-call forks, SPEC §8 (a)) hold their own copy of what they
            # forked and stay its forks: the row's delete would set their parent to null
            forks = list(Run.objects.filter(parent_run_id=run_id).values_list("pk", flat=True))
            existing.delete()
        else:
            created_at, created_by, forks = None, account(self.user), []
        self.store.append(run_id, events, expected_seq=0)
        if forks:
            Run.objects.filter(pk__in=forks).update(parent_run_id=run_id)
        fields: dict[str, object] = {"trace_id": imported.trace_id, "created_by": created_by,
                                     "conversation_id": imported.conversation or ""}
        if created_at is not None:
            fields["created_at"] = created_at
        Run.objects.filter(pk=run_id).update(**fields)
        return run_id


__all__ = ["ReceiverBusy", "TraceImport", "import_document", "import_log_events", "import_spans",
           "receiving_project", "remap_trace", "run_id_for", "trace_spans",
           "unmapped_traces"]

