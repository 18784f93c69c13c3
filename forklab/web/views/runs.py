"""The run page: header, timeline with fork points, state inspector, composer, events, graph
picture, forks and lineage. ``run_context`` also serves read-only share links."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from forklab.engine.errors import ForklabError
from forklab.engine.graph import GraphSpec
from forklab.runs import imported_forks, queries
from forklab.runs.models import Run
from forklab.runs.positions import parse_seq, seq_in
from forklab.runs.serializers_json import event_to_json
from forklab.web import graphpic, timeline
from forklab.web.imported import imported_forks_of
from forklab.web.inspector import inspector
from forklab.web.timeline_filters import LABELS, STATUSES, Filters
from forklab.web.views.common import (
    htmx_target,
    int_param,
    page_errors,
    page_or_partial,
    roles,
)
from forklab.web.views.forks import composer_context
from forklab.web.views.live import last_events, pending_gate

EVENTS_PER_PAGE = 50
LIVE_ROWS = 20  # the live section's rows at render; the whole log is the event table's
PARTIALS = ("workspace", "events")


@login_required
@require_GET
@page_errors
def run_page(request: HttpRequest, run_id: str) -> HttpResponse:
    run = queries.get_run(run_id, user=request.user)
    return page_or_partial(request, "web/run.html", page_context(request, run),
                           partials=PARTIALS)


def page_context(request: HttpRequest, run: Run) -> dict[str, Any]:
    """The run page's context for a signed-in reader (:func:`run_context`, and the live
    section of a run still recording)."""
    context = run_context(request, run, readonly=False)
    if not run.finished and htmx_target(request) not in PARTIALS:
        # still recording: its events stream in (web/_run_live.html), as on the fork live
        # view; share pages have no account to open the stream with. A paused run's section
        # asks its gate's question, with the form answering it for a member
        # (web/_gate_answer.html, posted to views.answers.answer)
        context["live"] = last_events(run, LIVE_ROWS)
        context["pending"] = pending_gate(run)
    return context


def run_context(request: HttpRequest, run: Run, *, readonly: bool,
                at: int | None = None) -> dict[str, Any]:
    """Everything the run page shows; ``readonly`` drops fork, sweep and share controls.

    ``at`` (else ``?at=``) is the seq the page shows the state at: not a number, or before the
    first event, is ``invalid_argument`` (the 400 page); past the end shows the end with a
    notice (a link made while the run was longer, or mistyped by one digit, still opens).
    """
    if at is None and request.GET.get("at", "") != "":
        at = parse_seq(request.GET["at"], name="at")
    past_end = at if at is not None and at > run.last_seq else None
    if at is not None and run.last_seq:
        at = seq_in(run, min(at, run.last_seq), name="at")
    elif at is not None:  # no event yet: the page shows the run as queued
        at = 0
    graph = _graph(run)
    kinds = {node.id: node.kind for node in graph.nodes} if graph else {}
    tl = timeline.build(run, page=int_param(request.GET.get("tl")), at=at, kinds=kinds,
                        filters=Filters.from_query(request.GET), jump=request.GET.get("jump"),
                        compact=request.GET.get("compact") == "1")
    if tl.jumped is not None:  # a jump selects the point before the execution it found
        at, past_end = tl.jumped.before_point, None
    access = {"can_fork": False, "is_admin": False, "role": None} if readonly else roles(
        request, run.project)
    chain = queries.lineage(run)
    point = _point(tl, at)
    context: dict[str, Any] = {
        "run": run, "readonly": readonly, **access, "at": at, "timeline": tl,
        "past_end": past_end, "kinds": sorted(set(kinds.values())),
        "point": point, "lineage": chain,
        "tree": [] if readonly else queries.fork_tree(chain[0]),
        "inspector": inspector(run, at, point, graph), "events": event_table(request, run, at),
        "picture": _picture(run, graph, tl, point), "forked": queries.forked(run),
        "one_call": queries.one_call(run),
        "forkable": run.finished and access["can_fork"] and not readonly,
        "filter_labels": LABELS, "filter_statuses": STATUSES,
        "point_query": point_query(request),
    }
    # a run imported from a trace forks before one call, never at a node point (SPEC §8):
    # its markers inspect, its calls are listed with the composer before each
    context["imported"] = None if readonly else imported_forks_of(
        run, forkable=context["forkable"])
    # ... and a one-call fork is not forked again (one_call_only): its imported run is
    context["node_points"] = not run.trace_id and not context["one_call"]  # fork points at all
    context["node_forks"] = context["forkable"] and context["node_points"]  # ... for this reader
    context["workflow_source"] = imported_forks.imported_source(chain[0])
    if context["node_forks"] and context["point"] is not None:
        context.update(composer_context(request, run, at, graph=graph, tl=tl))
    return context


def point_query(request: HttpRequest) -> str:
    """The query a fork-point link keeps (filters, compact), ending in ``&`` when not empty:
    a marker links to ``?<this>at=SEQ`` (built once, not once per marker)."""
    query = request.GET.copy()
    for name in ("at", "tl", "epage", "jump"):
        query.pop(name, None)
    encoded = query.urlencode()
    return f"{encoded}&" if encoded else ""


def _graph(run: Run) -> GraphSpec | None:
    try:
        return queries.graph_of(run)
    except ForklabError:  # a run without a stored graph still has a page
        return None


def _point(tl: timeline.Timeline, at: int | None) -> timeline.ChosenPoint | None:
    """The chosen fork point, when ``at`` is one of the run's boundaries."""
    return None if at is None or at not in tl.points else tl.point(at)


def event_table(request: HttpRequest, run: Run, at: int | None) -> dict[str, Any]:
    """One page of the log (paged in SQL), optionally of one event type."""
    types = queries.event_types(run.id)
    type_ = request.GET.get("type") or None
    if type_ not in types:
        type_ = None
    page = int_param(request.GET.get("epage"))
    if page is None and at is not None:
        page = queries.events_before(run.id, at + 1, type=type_) // EVENTS_PER_PAGE + 1
    page = max(1, page or 1)
    events, total = queries.event_page(run.id, type=type_, offset=(page - 1) * EVENTS_PER_PAGE,
                                       limit=EVENTS_PER_PAGE)
    rows = [event_to_json(e) for e in events]
    pages = max(1, (total + EVENTS_PER_PAGE - 1) // EVENTS_PER_PAGE)
    return {"rows": rows, "total": total, "page": min(page, pages), "pages": pages,
            "type": type_, "types": types, "at": at}


def _picture(run: Run, graph: GraphSpec | None, tl: timeline.Timeline,
             point: timeline.ChosenPoint | None) -> graphpic.Picture | None:
    if graph is None:
        return None
    first: dict[str, int] = {}
    for bar in tl.all_bars:
        first.setdefault(bar.node, bar.before_point)
    hrefs = {node: f"?at={seq}" for node, seq in first.items()}
    current = point.after.node if point and point.after is not None else None
    # the row's ``path`` is the SPEC §4.6 JSON column ({node, occurrence, iteration, status}
    # per execution, written by the run-row projection); the picture counts nodes only
    executed = (entry["node"] for entry in run.path or [])
    return graphpic.picture(graph, executed, hrefs=hrefs, current=current)
