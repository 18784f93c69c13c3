"""Use case: runs from OpenTelemetry traces (SPEC §8 "In"), for the OTLP receiver.

Receiving is two steps: **storing** and **mapping**.

- **Storing** (every request, one short transaction): the request's new spans (or log
  records) are inserted once per project, trace and span id, and each trace that gained
  something is put on the project's **backlog** (:class:`TraceBacklog`) in the same
  transaction. Nothing is half-stored: a request's spans are stored whole or not at all.
  ``partial_success`` (the spans that cannot be read or mapped) is decided here, from the
  pure per-span reading (``observe``), never from the mapping.
- **Mapping** a backlogged trace re-maps it whole — from every span and record stored for
  it — by the engine's pure mapping and writes its run in one transaction (a run is written
  whole or not at all); its backlog row is deleted in that transaction only when nothing
  arrived for the trace since the mapper read it (the row's ``mark``), so a span stored
  meanwhile keeps the trace on the backlog. Mapping is done in the request when it is
  cheap and the receiver is idle — a request of at most ``FORKLAB_OTLP_INLINE_TRACES``
  traces, none holding ``FORKLAB_TRACE_INLINE_SPANS`` spans already, and no mapping
  running in this process — so a small export's run is there when the answer is; else by
  the background task :func:`map_backlog` (one per project at a time), in batches of
  traces, each trace no sooner than ``FORKLAB_TRACE_REMAP_DELAY`` after it joined the
  backlog (a trace extended span by span is re-mapped once per delay, not once per
  request; a trace whose root span arrives one flush later is mapped once when the backlog
  lags). ``POST /api/v1/imports/`` and ``forklab import`` always map in the request.
- **Recovery**: the backlog is in the database, so a trace stored by a process that died
  before mapping it is mapped by the next request for the trace, or by the recovery sweep
  (:func:`sweep_backlog`, at start-up and every ``FORKLAB_RECOVERY_SWEEP_S``).
- **Idempotent**: a request that adds no span to a trace (a re-send) puts nothing on the
  backlog; the same spans, however batched, end in the same events.
- **Late spans**: a trace whose mapping changed has its run's log *rewritten* (the run row
  is replaced under the same id, keeping its creation time, creator and forks). An imported
  run's log is derived data — the spans are its truth.
- **Back-pressure** (the last resort): one store at a time per process; a request that
  waited ``FORKLAB_OTLP_WAIT`` seconds to store is refused ``throttled`` (429 with
  ``Retry-After``, which exporters retry) with nothing stored.
- The run id is a function of the project and the trace id, so each project has one run per
  trace and ``GET /api/v1/runs/?trace_id=ID`` finds it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, close_old_connections, connection, transaction
from django.db.models import Count
from django.tasks import task
from django.utils import timezone

from forklab.engine.canonical import fingerprint
from forklab.engine.errors import ForklabError
from forklab.engine.events import RunStarted, TraceImported
from forklab.engine.graph import GraphSpec
from forklab.engine.providers.pricing import PriceTable
from forklab.engine.store import graph_hash
from forklab.engine.traces import ImportedRun, Rejected, SpanRecord, map_trace, read_otlp_json
from forklab.engine.traces.langfuse import is_langfuse, read_langfuse
from forklab.engine.traces.logs import LogEvent, attach, log_from_wire
from forklab.engine.traces.mapping import observe
from forklab.engine.traces.otlp import span_from_wire
from forklab.runs import inserts, queries
from forklab.runs.access import User, account, require_role, signed_in
from forklab.runs.errors import NotFound
from forklab.runs.models import (
    Event,
    GraphVersion,
    Project,
    Run,
    TraceBacklog,
    TraceLogEvent,
    TraceSpan,
)
from forklab.runs.store import DjangoStore

log = logging.getLogger("forklab.runs.traces")


class ReceiverBusy(ForklabError):
    """The receiver has been storing other requests for longer than
    ``FORKLAB_OTLP_WAIT`` seconds: retry later (OTLP's back-pressure, ``429`` with
    ``Retry-After``, which exporters honour)."""

    code = "throttled"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, retry_after=retry_after)
        self.retry_after = retry_after


# One store at a time in this process: requests queue here (and answer 429 when the wait
# is too long) rather than on the database's write lock, whose timeout is a 500 on SQLite
_storing = threading.Lock()
# One mapping at a time in this process (a request's or the backlog task's batch): mapping
# is CPU in Python, two at once would only share the interpreter
_mapping = threading.Lock()


@contextmanager
def _one_store() -> Iterator[None]:
    wait = settings.FORKLAB_OTLP_WAIT
    if not _storing.acquire(timeout=wait):
        raise ReceiverBusy(f"the trace receiver has been busy for {wait:g} s storing other "
                           "requests; retry later (nothing of this request was stored)",
                           retry_after=max(1, round(wait / 4)))
    try:
        yield
    finally:
        _storing.release()


@dataclass(frozen=True)
class TraceImport:
    """What one receive did: the ids of its traces' runs (written, already equal, or —
    when the receiver deferred them — written once the backlog reaches them), and the
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
    """Store ``spans`` (atomically) and map the traces they extend into runs.

    Without ``defer`` every trace is mapped before this returns. With ``defer`` (the OTLP
    receiver) they are mapped here only when that is cheap and nothing else is mapping
    (:func:`_map_if_idle`); else the backlog task maps them shortly after. Either way the
    answer names the run of every trace of the request (its id is a function of the trace)
    and the spans that cannot be mapped.
    """
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    rejected = list(unreadable)
    for span in {s.span_id: s for s in spans}.values():  # what the mapping rejects
        found = observe(span)
        if isinstance(found, str):
            rejected.append(Rejected(span.span_id, span.name, found))
    with _one_store(), transaction.atomic():
        known, counts = _stored(project, by_trace)
        now = timezone.now()
        new = [(project.pk, trace_id, s.span_id, s.to_wire(), now)
               for trace_id, sent in by_trace.items()
               for s in {s.span_id: s for s in sent if s.span_id not in known[trace_id]}.values()]
        _insert_spans(new)
        _put_on_backlog(project, sorted({row[1] for row in new}))
    if defer:
        _map_if_idle(project, user, sorted(by_trace), counts)
    else:
        with _mapping:
            _map_traces(project, user, sorted(by_trace), wait=True)
    return TraceImport(runs=[run_id_for(project, t) for t in sorted(by_trace)],
                       rejected=rejected)


def import_log_events(*, user: User | None, project: Project, events: list[LogEvent],
                      unreadable: list[Rejected]) -> TraceImport:
    """Store GenAI log records (content sent as log events) and map the traces they belong
    to as :func:`import_spans` with ``defer`` does; a trace none of whose spans arrived yet
    just keeps them until its spans do."""
    by_trace: dict[str, list[LogEvent]] = defaultdict(list)
    for event in events:
        by_trace[event.trace_id].append(event)
    with _one_store(), transaction.atomic():
        TraceLogEvent.objects.bulk_create(
            [TraceLogEvent(project=project, trace_id=trace_id, span_id=e.span_id,
                           key=e.key, record=e.to_wire())
             for trace_id, sent in by_trace.items() for e in sent],
            ignore_conflicts=True)
        _put_on_backlog(project, sorted(by_trace))
    spans = _span_counts(project, list(by_trace))
    _map_if_idle(project, user, sorted(by_trace), spans)
    return TraceImport(runs=[run_id_for(project, t) for t in sorted(by_trace) if t in spans],
                       rejected=list(unreadable))


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
    return known, _span_counts(project, list(by_trace))


_SPAN_COLUMNS = ("project_id", "trace_id", "span_id", "record", "received_at")


def _insert_spans(rows: list[tuple[int, str, str, dict[str, Any], Any]]) -> None:
    """Insert span rows (:data:`_SPAN_COLUMNS`) not stored yet, in one statement. Another
    process may have stored one of them since they were looked up (the unique key refuses
    it): then they are inserted skipping the ones stored (a savepoint keeps the request's
    transaction usable). The plain insert: ``bulk_create`` spent more CPU building its
    statement and preparing values than storing the rows (~50 ms of a 510-span request)."""
    try:
        with transaction.atomic():
            inserts.insert_values(TraceSpan, _SPAN_COLUMNS, rows)
    except IntegrityError:
        TraceSpan.objects.bulk_create(
            [TraceSpan(**dict(zip(_SPAN_COLUMNS, row, strict=True))) for row in rows],
            ignore_conflicts=True)


def _span_counts(project: Project, trace_ids: list[str]) -> dict[str, int]:
    """How many spans each of ``trace_ids`` has stored (absent: none)."""
    return dict(TraceSpan.objects.filter(project=project, trace_id__in=trace_ids)
                .values("trace_id").annotate(n=Count("id")).values_list("trace_id", "n"))


def _put_on_backlog(project: Project, trace_ids: list[str]) -> None:
    """Put ``trace_ids`` on the backlog, in the caller's storing transaction: a trace
    already on it keeps its ``since`` (when it is due) and gets a fresh ``mark`` (a mapper
    that read it before this arrival will not take it off)."""
    if not trace_ids:
        return
    now = timezone.now()
    TraceBacklog.objects.bulk_create(
        [TraceBacklog(project=project, trace_id=t, since=now, mark=uuid.uuid4().hex)
         for t in trace_ids],
        update_conflicts=True, update_fields=["mark"], unique_fields=["project", "trace_id"])


def _map_if_idle(project: Project, user: User | None, trace_ids: list[str],
                 counts: dict[str, int]) -> None:
    """Map the request's backlogged traces here when that is cheap and the receiver idle:
    at most ``FORKLAB_OTLP_INLINE_TRACES`` traces, those holding fewer than
    ``FORKLAB_TRACE_INLINE_SPANS`` spans before it (``counts``), and no mapping running in
    this process (under load, mapping here would only make the exporter wait). What stays
    on the backlog is left to :func:`map_backlog`, enqueued for it."""
    limit = max(1, settings.FORKLAB_TRACE_INLINE_SPANS)
    now = ([t for t in trace_ids if counts.get(t, 0) < limit]
           if len(trace_ids) <= settings.FORKLAB_OTLP_INLINE_TRACES else [])
    done: set[str] = set()
    if now and _mapping.acquire(blocking=False):
        try:
            done = _map_traces(project, user, now, wait=False)
        finally:
            _mapping.release()
    rest = sorted(set(trace_ids) - done)
    if rest and TraceBacklog.objects.filter(project=project, trace_id__in=rest).exists():
        _schedule(project.pk)


def _map_traces(project: Project, user: User | None, trace_ids: list[str], *,
                wait: bool) -> set[str]:
    """Map the backlogged traces among ``trace_ids`` and write their runs; the traces taken
    off the backlog.

    The marks are read first, then the spans, and the mapping (pure CPU) is done outside
    any transaction; the runs are written, and their rows deleted, in one transaction only
    for traces whose mark is unchanged — a trace that received more meanwhile is left on
    the backlog, due one delay later. ``wait``: wait for rows another mapper holds
    (PostgreSQL row locks) rather than skip them.
    """
    marks = dict(TraceBacklog.objects.filter(project=project, trace_id__in=trace_ids)
                 .values_list("trace_id", "mark"))
    if not marks:
        return set()
    prices = PriceTable(settings.FORKLAB_PRICES)
    spans = _trace_spans(project, sorted(marks))
    mapped = {trace_id: map_trace(of, run_id=run_id_for(project, trace_id), prices=prices)
              for trace_id, of in spans.items()}
    with transaction.atomic():
        rows = TraceBacklog.objects.select_for_update(skip_locked=not wait).filter(
            project=project, trace_id__in=list(marks))
        current = {t: (pk, mark) for pk, t, mark in rows.values_list("pk", "trace_id", "mark")}
        done = sorted(t for t, (_, mark) in current.items() if marks[t] == mark)
        again = [pk for t, (pk, mark) in current.items() if marks[t] != mark]
        writer = _Writer(project, user)
        writer.existing([run_id_for(project, t) for t in done if t in mapped])
        up_to_date = _mapped_spans(project, [t for t in done if t in mapped])
        for trace_id in done:
            if trace_id in mapped:  # else records without spans: mapped when spans come
                # unchanged span count: only new log records may change it, compare
                writer.write(mapped[trace_id],
                             compare=up_to_date.get(trace_id) == len(spans[trace_id]))
        TraceBacklog.objects.filter(pk__in=[current[t][0] for t in done]).delete()
        if again:  # due one delay from now, not at once: a trace still arriving
            TraceBacklog.objects.filter(pk__in=again).update(since=timezone.now())
    return set(done)


def _mapped_spans(project: Project, trace_ids: list[str]) -> dict[str, int]:
    """How many spans each trace's run was mapped from (its ``trace.imported`` count)."""
    runs = {run_id_for(project, t): t for t in trace_ids}
    rows = Event.objects.filter(run_id__in=list(runs), seq=2, type=TraceImported.TYPE
                                ).values_list("run_id", "payload")
    return {runs[run_id]: int(payload.get("spans", 0)) for run_id, payload in rows}


def unmapped_traces(project: Project) -> list[str]:
    """The project's traces whose run does not reflect every stored span (counted from the
    spans and the runs, not from the backlog: what benchmarks and tests check)."""
    stored = dict(TraceSpan.objects.filter(project=project).values("trace_id")
                  .annotate(n=Count("id")).values_list("trace_id", "n"))
    mapped = _mapped_spans(project, list(stored))
    return sorted(t for t, n in stored.items() if mapped.get(t) != n)


def backlog(project: Project) -> list[str]:
    """The traces on the project's backlog (stored, not mapped since), oldest first."""
    return list(TraceBacklog.objects.filter(project=project).order_by("since", "trace_id")
                .values_list("trace_id", flat=True))


# Projects whose backlog task this process has enqueued and not started, and those whose
# task is running: a burst of requests enqueues one task per project, not one per request
_scheduled: set[int] = set()
_running: set[int] = set()
_scheduled_lock = threading.Lock()

# Traces mapped per transaction by the backlog task: many runs per commit, while a
# transaction stays short (~0.1-0.2 s) for the requests storing meanwhile
BATCH = 25

# A trace that failed to map is retried this long after (seconds)
RETRY_FAILED = 600.0

# OTLP requests this process is receiving now (decoding, storing): the backlog task lets
# them go first — mapping is CPU in Python, and a mapping thread running beside a request
# halves the request's share of the interpreter (the exporter waits twice as long)
_receiving = 0
_receiving_lock = threading.Lock()
# ...but waits at most this long per batch (seconds): under a receiver that is never idle
# (PostgreSQL's slower stores overlap) the backlog must still move
YIELD_AT_MOST = 0.5


@contextmanager
def receiving() -> Iterator[None]:
    """Around an OTLP request's work: the backlog task waits while any is under way."""
    global _receiving
    with _receiving_lock:
        _receiving += 1
    try:
        yield
    finally:
        with _receiving_lock:
            _receiving -= 1


def _yield_to_requests() -> None:
    """Wait (at most :data:`YIELD_AT_MOST`) until no OTLP request is being received."""
    deadline = time.monotonic() + YIELD_AT_MOST
    while _receiving and time.monotonic() < deadline:
        time.sleep(0.01)


def _schedule(project_id: int) -> None:
    """Enqueue :func:`map_backlog` for the project once the caller's transaction commits,
    unless one is enqueued and not started yet (it will see this request's traces)."""

    def enqueue() -> None:
        with _scheduled_lock:
            if project_id in _scheduled:
                return
            _scheduled.add(project_id)
        try:
            map_backlog.enqueue(project_id)
        except Exception:
            with _scheduled_lock:
                _scheduled.discard(project_id)
            raise

    transaction.on_commit(enqueue)


@task
def map_backlog(project_id: int) -> str:
    """Map the project's backlog until it is empty: the due traces (on the backlog for
    ``FORKLAB_TRACE_REMAP_DELAY``), oldest first, :data:`BATCH` per transaction; waits for
    the traces not due yet. Idempotent; several at once (processes) take disjoint traces."""
    with _scheduled_lock:  # from here on, a new arrival enqueues another task
        _scheduled.discard(project_id)
        _running.add(project_id)
    try:
        return _drain_backlog(project_id)
    finally:
        with _scheduled_lock:
            _running.discard(project_id)


def _drain_backlog(project_id: int) -> str:
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return "skipped: the project is gone"
    mapped = 0
    while True:
        delay = timedelta(seconds=settings.FORKLAB_TRACE_REMAP_DELAY)
        now = timezone.now()
        queue = TraceBacklog.objects.filter(project=project)
        lanes = _lanes()
        due = list(queue.filter(since__lte=now - delay).order_by("since")
                   .values_list("trace_id", flat=True)[:BATCH * lanes])
        if due:
            _yield_to_requests()
            with _mapping:  # one mapper per process; requests map between batches
                try:
                    done = _map_in_lanes(project, [due[i::lanes] for i in range(lanes)])
                except Exception:  # one trace must not hold up the project's backlog
                    done = _map_one_by_one(project, due)
            mapped += len(done)
            if not done:
                time.sleep(0.1)  # another process is mapping these
            continue
        first = queue.order_by("since").values_list("since", flat=True).first()
        if first is None:
            return f"mapped {mapped} traces"
        wait = (first + delay - now).total_seconds()
        if wait > 5.0:  # a failed trace's retry: the recovery sweep enqueues it when due
            return f"mapped {mapped} traces; the rest is due in {wait:.0f} s"
        time.sleep(max(0.01, wait))


def _map_one_by_one(project: Project, trace_ids: list[str]) -> set[str]:
    """A batch that failed, mapped a trace per transaction: a trace that fails alone (a
    run the store refuses, a bug) is logged and put back on the backlog for
    :data:`RETRY_FAILED` seconds from now, behind the traces that map."""
    done: set[str] = set()
    for trace_id in trace_ids:
        try:
            done |= _map_traces(project, None, [trace_id], wait=False)
        except Exception:
            log.exception("could not map trace %s of project %s; retrying in %g s",
                          trace_id, project.slug, RETRY_FAILED)
            TraceBacklog.objects.filter(project=project, trace_id=trace_id).update(
                since=timezone.now() + timedelta(seconds=RETRY_FAILED))
    return done


def _lanes() -> int:
    """Batches the backlog task writes at once: two on PostgreSQL, where a batch spends
    about half its time waiting for the server's answers (the other batch's Python runs
    meanwhile; their traces are disjoint, their rows locked); one on SQLite, which has one
    writer at a time anyway."""
    return 2 if connection.vendor == "postgresql" else 1


_lane_pool: ThreadPoolExecutor | None = None


def _map_in_lanes(project: Project, lanes: list[list[str]]) -> set[str]:
    """:func:`_map_traces` of each lane (a batch), the first in this thread and the others
    on a thread of their own (each with its own database connection); the traces mapped."""
    global _lane_pool
    rest = [lane for lane in lanes[1:] if lane]
    futures = []
    if rest:
        with _scheduled_lock:
            if _lane_pool is None:
                _lane_pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="forklab-map")
            pool = _lane_pool
        futures = [pool.submit(_map_lane, project, lane) for lane in rest]
    done = _map_traces(project, None, lanes[0], wait=False)
    for future in futures:
        done |= future.result()
    return done


def _map_lane(project: Project, trace_ids: list[str]) -> set[str]:
    close_old_connections()  # a long-lived thread: its connection may have gone stale
    return _map_traces(project, None, trace_ids, wait=False)


def sweep_backlog() -> list[int]:
    """Enqueue the backlog task of every project with traces due for a while and no task
    for them in this process: the traces of a process that died between storing and
    mapping (the recovery sweep calls this at start-up and every interval)."""
    stale = timezone.now() - timedelta(seconds=settings.FORKLAB_TRACE_REMAP_DELAY + 1.0)
    projects = sorted(set(TraceBacklog.objects.filter(since__lt=stale)
                          .values_list("project_id", flat=True).distinct()))
    with _scheduled_lock:
        idle = [p for p in projects if p not in _scheduled and p not in _running]
    for project_id in idle:
        _schedule(project_id)
    return idle


def trace_spans(project: Project, trace_id: str) -> list[SpanRecord]:
    """Every span stored for a trace, with the log records stored for it put on them (what
    its run is mapped from); empty when no span arrived yet."""
    return _trace_spans(project, [trace_id]).get(trace_id, [])


def _trace_spans(project: Project, trace_ids: list[str]) -> dict[str, list[SpanRecord]]:
    """:func:`trace_spans` of several traces in two queries (absent: no span yet)."""
    spans: dict[str, list[SpanRecord]] = defaultdict(list)
    for trace_id, record in TraceSpan.objects.filter(
            project=project, trace_id__in=trace_ids).values_list("trace_id", "record"):
        spans[trace_id].append(span_from_wire(record))
    events: dict[str, list[LogEvent]] = defaultdict(list)
    for trace_id, record in TraceLogEvent.objects.filter(
            project=project, trace_id__in=list(spans)).values_list("trace_id", "record"):
        events[trace_id].append(log_from_wire(record))
    return {t: attach(s, events[t]) if events[t] else s for t, s in spans.items()}


# (project id, graph id, content hash) -> its committed version: the traces of one app
# share a synthetic graph, whose version is then looked up once per process, not once per
# batch (saving takes the graph row's lock, which would serialize concurrent batches)
_graph_versions: dict[tuple[int, str, str], int] = {}


class _Writer:
    """Writes mapped traces' runs for one batch: the synthetic graphs it saves are
    remembered (the traces of one app share a graph, saved once, not once per trace), and
    the runs that exist already are read in one query (:meth:`existing`)."""

    def __init__(self, project: Project, user: User | None) -> None:
        self.project, self.user = project, user
        self.store = DjangoStore(project, created_by=account(user))
        self.versions: dict[tuple[str, str], int] = {}
        self.runs: dict[str, Run | None] = {}

    def existing(self, run_ids: list[str]) -> None:
        """Read the rows of those of ``run_ids`` that exist, for the writes to come."""
        found = Run.objects.in_bulk(run_ids)
        self.runs.update({run_id: found.get(run_id) for run_id in run_ids})

    def _save_graph(self, graph: GraphSpec, key: tuple[str, str]) -> int:
        """Save the synthetic graph (its version); remembered for the process once the
        transaction commits (a version rolled back with it is not)."""
        version = self.store.save_graph(graph)
        transaction.on_commit(lambda: _graph_versions.__setitem__(
            (self.project.pk, *key), version))
        return version

    def write(self, imported: ImportedRun, *, compare: bool = True) -> str:
        """Write ``imported``'s run (rewrite it when it exists). ``compare``: leave the run
        as it is when its log already equals the mapping (a caller that knows the mapping
        changed — the trace gained a span, so ``trace.imported`` counts one more — skips
        reading it)."""
        graph = imported.graph
        key = (graph.id, graph.content_hash)
        if key not in self.versions:
            known = _graph_versions.get((self.project.pk, *key))
            if known is not None and not GraphVersion.objects.filter(  # a lock-free check
                    graph__project=self.project, graph__graph_id=graph.id, version=known,
                    spec_hash=graph_hash(graph)).exists():
                known = None  # gone (a database reset under this process)
            self.versions[key] = known or self._save_graph(graph, key)
        first = imported.events[0]
        assert isinstance(first, RunStarted)
        events = [dataclasses.replace(first, graph_version=self.versions[key]),
                  *imported.events[1:]]
        run_id = first.run_id
        existing = (self.runs.pop(run_id) if run_id in self.runs
                    else Run.objects.filter(pk=run_id).first())
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


__all__ = ["ReceiverBusy", "TraceImport", "backlog", "import_document", "import_log_events", "import_spans",
           "map_backlog", "receiving", "receiving_project", "run_id_for", "sweep_backlog", "trace_spans",
           "unmapped_traces"]

