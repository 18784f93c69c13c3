"""What forking an imported run may do, and forks of imported runs whose trace names a
registered workflow (SPEC §8 (b)).

Every fork of an imported run waits for its trace to settle (``require_settled``); replay
and fork-check take only what can be re-executed whole (``require_replayable``); an
unmapped run is forked one call at a time (``engine.fork.onecall``, SPEC §8 (a)).

``FORKLAB_WORKFLOW_MAP`` maps a trace's agent or workflow name to a code-first workflow
(SPEC §7). An imported run whose name is mapped is forked as that workflow: the run is
re-read as the workflow's recording (``engine.traces.as_workflow``) and stored as a run of
its own — the **workflow base** — which the fork then forks through the ordinary workflow
fork path: the code re-executes, the imported calls answer its prefix, memo, guard and
budgets apply as for any workflow run.

Why a stored run rather than a view built per request: a fork's log refers to its base by
id (lineage, diff, forks of the fork, fork points, the prefix kept by reference), and an
imported run's own log is rewritten when late spans arrive — the workflow base is a frozen
copy. Its id is a hash of the imported run's log, the workflow's graph and its input, so
asking again finds the same base (nothing is written twice) and a trace that grew gets a
new one. It is a primary run of the workflow's graph whose ``trace.imported`` event names
the trace and, per call, the imported call it came from (``imported_call``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from forklab.engine.canonical import fingerprint
from forklab.engine.errors import ForklabError, WorkflowMapInvalid
from forklab.engine.events import AnyEvent
from forklab.engine.fork import ForkPoint
from forklab.engine.fork import fork_points as engine_fork_points
from forklab.engine.fork.changes import InputPatchChange, parse_changes
from forklab.engine.graph import GraphSpec, WorkflowNode, parse_stored_graph
from forklab.engine.traces.as_workflow import (
    WorkflowRecording,
    as_workflow,
    step_io,
    workflow_input,
)
from forklab.engine.workflows import (
    declared_tools,
    workflow_graph,
    workflow_reads,
    workflow_required,
)
from forklab.runs.engine_env import build_environment
from forklab.runs.errors import ImportedRunNotForkable, TraceArriving
from forklab.runs.models import Event, GraphVersion, Run
from forklab.runs.models.traces import TraceBacklog, TraceLogEvent, TraceSpan
from forklab.runs.store import DjangoStore
from forklab.runs.traces import trace_spans

ImportedForkKind = Literal["one_call", "workflow"]

WORKFLOW_BASE_PREFIX = "wf-"
"""The id prefix of every workflow base (derived data: the runs page hides them by
default, the run page names the imported run each was made from)."""


def run_names(run: Run) -> list[str]:
    """The names an imported run goes by, as the trace gave them: its workflow (root) name
    — the run's label — then each node's agent or span name and node id, in graph order."""
    names = [run.label] if run.label else []
    spec = None if run.graph_version_id is None else GraphVersion.objects.filter(
        pk=run.graph_version_id).values_list("spec", flat=True).first()
    for node in (spec or {}).get("nodes", []):
        names += [str(node.get("description") or ""), str(node.get("id") or "")]
    return [n for i, n in enumerate(names) if n and n not in names[:i]]


def mapped(run: Run) -> tuple[str, str] | None:
    """``(name, target)``: the first of the run's names ``FORKLAB_WORKFLOW_MAP`` maps, and
    the workflow it maps it to; None for a run that is not imported or not mapped."""
    table: dict[str, str] = settings.FORKLAB_WORKFLOW_MAP
    if not run.trace_id or not table:
        return None
    return next(((n, table[n]) for n in run_names(run) if n in table), None)


def imported_fork_kind(run: Run) -> ImportedForkKind:
    """How an imported run is forked: ``workflow`` when its name is mapped to registered
    code (re-executed, this module), else ``one_call`` (a call re-asked on its own)."""
    return "workflow" if mapped(run) is not None else "one_call"


def _workflow(run: Run, name: str, target: str) -> tuple[str, GraphSpec]:
    """The ``module:function`` and current graph of the workflow ``target`` names: a
    ``module:function`` itself, else the id of a workflow recorded in the run's project.
    Anything this deployment cannot run is ``workflow_map_invalid``."""
    path = target
    if ":" not in target:
        spec = (GraphVersion.objects.filter(graph__project=run.project, graph__graph_id=target)
                .order_by("-version").values_list("spec", flat=True).first())
        node = parse_stored_graph(spec).nodes[0] if spec else None
        if not isinstance(node, WorkflowNode):
            raise WorkflowMapInvalid(
                f"FORKLAB_WORKFLOW_MAP maps {name!r} to {target!r}, which is neither a "
                f"'module:function' nor a workflow recorded in project {run.project.slug!r}; "
                "map it to the workflow's module:function (its module under "
                "FORKLAB_WORKFLOW_MODULES)", name=name, workflow=target)
        path = node.fn
    try:
        return path, workflow_graph(build_environment().workflows, path)
    except ForklabError as exc:
        raise WorkflowMapInvalid(
            f"FORKLAB_WORKFLOW_MAP maps {name!r} to {target!r}, which cannot be run here: "
            f"{exc.message}", name=name, workflow=target, cause=exc.code) from None


def supplied_input(changes: Sequence[Any]) -> dict[str, Any] | None:
    """The workflow input a fork request's input patches give (None: no patch)."""
    patches = [c for c in parse_changes(list(changes)) if isinstance(c, InputPatchChange)]
    if not patches:
        return None
    given: dict[str, Any] = {}
    for patch in patches:
        given.update({k: v for k, v in patch.patch.items() if v is not None})
    return given


def _recording(run: Run, *, changes: Sequence[Any] = (),
               listing: bool = False) -> tuple[str, WorkflowRecording]:
    """The workflow base's id and recording for imported run ``run`` (mapped). Its input is
    what the mapped span captured, else what ``changes``' input patches give; ``listing``
    (fork points only) leaves a missing input empty and stores nothing."""
    found = mapped(run)
    assert found is not None
    name, target = found
    path, graph = _workflow(run, name, target)
    fn = build_environment().workflows.resolve(path)
    io = step_io(trace_spans(run.project, run.trace_id), {name})
    try:
        given = workflow_input(io.input, workflow=graph.id, parameters=workflow_reads(fn),
                               required=workflow_required(fn), span=name,
                               supplied=None if io.input is not None
                               else supplied_input(changes))
    except ForklabError:
        if not listing:
            raise
        given = {}
    store = DjangoStore(run.project)
    events = store.read(run.id)
    version = 0 if listing else store.save_graph(graph)
    base_id = WORKFLOW_BASE_PREFIX + fingerprint({
        "run": run.id, "log": [e.untimed_wire() for e in events], "graph": graph.content_hash,
        "input": given})[:29]
    recording = as_workflow(events, graph=graph, graph_version=version, run_id=base_id,
                            input=given, output=io, tool_effects=declared_tools(fn),
                            label=f"{graph.id} — trace {run.trace_id}")
    return base_id, recording


def workflow_base(run: Run, *, created_by: Any = None,
                  changes: Sequence[Any] = ()) -> Run:
    """The stored workflow base of imported run ``run`` (mapped), written once: what a fork
    of ``run`` forks. ``changes``: the fork request's, whose input patch gives the
    workflow's arguments when the trace did not capture them (``workflow_input_missing``
    when neither did)."""
    base_id, recording = _recording(run, changes=changes)
    existing = Run.objects.select_related("project").filter(pk=base_id).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            DjangoStore(run.project, created_by=created_by).append(
                base_id, recording.events, expected_seq=0)
    except (IntegrityError, ForklabError):  # the same base written by a concurrent request
        found = Run.objects.select_related("project").filter(pk=base_id).first()
        if found is None:
            raise
        return found
    return Run.objects.select_related("project").get(pk=base_id)


def fork_points(run: Run) -> list[ForkPoint]:
    """The fork points of imported run ``run`` (mapped): its workflow base's — a point
    before every call the code makes (``before:WF#1/openai:3``) — worked out without
    storing anything (the base is written when a fork is asked for)."""
    return engine_fork_points(recording_events(run))


def recording_events(run: Run) -> list[AnyEvent]:
    """The events the workflow base of imported run ``run`` (mapped) would hold, worked
    out without storing anything: what the composer shows of the call a fork re-asks."""
    _, recording = _recording(run, listing=True)
    return list(recording.events)


def imported_source(base: Run) -> Run | None:
    """The imported run workflow base ``base`` was made from (its ``trace.imported`` names
    the trace; one run per trace per project), None for any other run or when that run
    is gone."""
    if not base.id.startswith(WORKFLOW_BASE_PREFIX):
        return None
    trace_id = (Event.objects.filter(run_id=base.id, type="trace.imported")
                .values_list("payload__trace_id", flat=True).first())
    if not trace_id:
        return None
    return Run.objects.filter(project=base.project_id, trace_id=trace_id).first()


def require_replayable(run: Run, *, check: bool = False) -> None:
    """Refuse to replay (``check``: fork-check) what cannot be re-executed whole
    (``imported_run``, saying what is possible instead):

    - a one-call fork of an imported run: it re-asked one call and ended;
    - a run imported from a trace not mapped to a workflow: its graph only describes the
      trace — a fork re-asks one of its calls instead (SPEC §8 (a));
    - for replay, any imported run and the workflow base made from one: replay serves
      every call by its whole-request hash, and a trace captured only part of each request
      (``forkcheck`` checks a mapped one through its base).
    """
    parent = Run.objects.filter(pk=run.parent_run_id).first() if run.parent_run_id else None
    if parent is not None and parent.trace_id and imported_fork_kind(parent) == "one_call":
        raise ImportedRunNotForkable(
            f"run {run.id!r} is a one-call fork of imported run {parent.id!r}: it re-asked "
            "one call and ended, so there is no whole run to replay or fork-check — diff it "
            "against its base, or fork the imported run again", run_id=run.id,
            trace_id=parent.trace_id)
    if run.trace_id and imported_fork_kind(run) == "one_call":
        raise ImportedRunNotForkable(
            f"run {run.id!r} was imported from trace {run.trace_id}; replaying or "
            "fork-checking it would re-execute the whole run, which its graph only describes "
            "— fork one of its replayable model calls instead (forklab fork RUN --at "
            "before:NODE#N/turn:T --model NODE#N/turn:T=MODEL; list them with forkpoints), "
            "or map its name to your code with FORKLAB_WORKFLOW_MAP",
            run_id=run.id, trace_id=run.trace_id)
    if not check and (run.trace_id or Event.objects.filter(
            run_id=run.id, type="trace.imported").exists()):
        raise ImportedRunNotForkable(
            f"run {run.id!r} was imported from a trace; replay checks runs forklab recorded "
            "whole (every call by its full request) — a trace captured only part of each "
            "request. Fork-check it instead (forklab forkcheck RUN)", run_id=run.id,
            trace_id=run.trace_id)


def require_settled(run: Run) -> None:
    """Refuse to fork a run imported from a trace that received spans (or log records) in
    the last ``FORKLAB_TRACE_SETTLE_S`` seconds, or whose stored spans are not all mapped
    into it yet (on the receiver's backlog) — ``trace_arriving``, with how long to wait:
    late spans rewrite its log, and a fork should start from the trace as it ends up. A fork
    already made keeps what it forked (its own log holds its copy)."""
    if not run.trace_id:
        return
    if TraceBacklog.objects.filter(project=run.project_id, trace_id=run.trace_id).exists():
        raise TraceArriving(  # stored, not mapped yet: the run does not show every span
            f"trace {run.trace_id} of run {run.id!r} has spans stored but not yet mapped "
            "into the run (the receiver maps a burst from its backlog); retry in a few "
            "seconds", run_id=run.id, trace_id=run.trace_id,
            retry_after_s=max(1.0, settings.FORKLAB_TRACE_REMAP_DELAY))
    if settings.FORKLAB_TRACE_SETTLE_S <= 0:
        return
    found = [TraceSpan.objects.filter(project=run.project_id, trace_id=run.trace_id)
             .aggregate(last=Max("received_at"))["last"],
             TraceLogEvent.objects.filter(project=run.project_id, trace_id=run.trace_id)
             .aggregate(last=Max("received_at"))["last"]]
    latest = max((t for t in found if t is not None), default=None)
    if latest is None:
        return
    ago = max(0.0, (timezone.now() - latest).total_seconds())
    wait = settings.FORKLAB_TRACE_SETTLE_S - ago
    if wait > 0:
        raise TraceArriving(
            f"trace {run.trace_id} of run {run.id!r} received spans {ago:.1f}s ago and may "
            f"still be arriving (late spans rewrite the run); retry in {wait:.1f}s",
            run_id=run.id, trace_id=run.trace_id, retry_after_s=round(wait, 1))


__all__ = ["WORKFLOW_BASE_PREFIX", "ImportedForkKind", "fork_points", "imported_fork_kind",
           "imported_source", "mapped", "recording_events", "require_replayable",
           "require_settled", "run_names", "supplied_input", "workflow_base"]
