"""The fork composer: open it at a point (optionally pre-filled by a fork link), preflight
it as the form changes, submit it (``forking.start_fork``) and go to the live view."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from forklab.engine.calls import parse_call_key
from forklab.engine.errors import ForklabError
from forklab.engine.fork.changes import Change, PromptChange
from forklab.engine.fork.wire import PreflightWire
from forklab.runs import forking, imported_forks, queries
from forklab.runs.engine_env import build_environment
from forklab.runs.errors import NotFound
from forklab.runs.models import Run
from forklab.runs.positions import parse_seq
from forklab.runs.specs import InvalidRequest
from forklab.web import timeline
from forklab.web.composer import Composer, build_composer, decode_changes, encode_changes
from forklab.web.forkform import ForkForm, read_call_form, read_fork_form
from forklab.web.imported import CallComposer, call_composer, imported_forks_of
from forklab.web.inspector import inspector
from forklab.web.views.common import (
    HtmxHttpRequest,
    forkable_run,
    htmx_target,
    int_param,
    page_errors,
    roles,
)


def _composer(run: Run, at: int | None, *, graph: Any = None,
              tl: timeline.Timeline | None = None) -> Composer:
    tl = tl or timeline.build(run, at=at)
    if at is None:  # no point given: before the first node
        at = tl.points[0] if tl.points else 0
    if at not in tl.points:
        raise NotFound(point_error(run, tl, at), seq=at)
    graph = graph or queries.graph_of(run)
    models = build_environment().prices.models()
    return build_composer(run, at, graph=graph, after=tl.after(at), models=models)


def point_error(run: Run, tl: timeline.Timeline, at: int) -> str:
    """Why ``at`` is no fork point of ``run``, and which points there are."""
    last = f"the last fork point is seq {tl.points[-1]}" if tl.points else "it has none"
    if at > run.last_seq:
        return (f"seq {at} is past the end of this run: it has {run.last_seq} events and "
                f"{last}")
    if at < 0:
        return f"seq {at} is not a position in a run: fork points count from seq 1 ({last})"
    return (f"seq {at} is not a fork point of this run; choose a marker on the timeline "
            "(a boundary before a node starts)")


def _call_composer(run: Run, key: str, seq: int | None) -> CallComposer:
    env = build_environment()
    return call_composer(run, key, seq=seq, models=env.prices.models(),
                         providers=env.providers.names())


def node_point_refusal(run: Run) -> InvalidRequest:
    """Why an imported run has no composer at a node point (SPEC §8): a fork of it starts
    before one call — one model call re-asked, or a call of the mapped workflow."""
    found = imported_forks.mapped(run)
    if found is None:
        return InvalidRequest(
            f"Forks of an imported run re-ask one model call: pick a replayable turn — in "
            f"the run page's “Fork one call” list, or a turn's “fork before” / “rerun live” "
            f"in a step's conversation (run {run.id}).", field="at")
    return InvalidRequest(
        f"A fork of this imported run re-executes workflow {found[1]} (FORKLAB_WORKFLOW_MAP "
        f"maps {found[0]!r}) with the trace answering the prefix: pick one of the "
        "workflow's calls on the run page (before:…/openai:N).", field="at")


def composer_context(request: HttpRequest, run: Run, at: int | None, *, graph: Any = None,
                     tl: timeline.Timeline | None = None,
                     changes: list[Change] | None = None) -> dict[str, Any]:
    """The composer at ``at``, its fields as the run had them overlaid with ``changes``."""
    composer = _composer(run, at, graph=graph, tl=tl)
    return {"composer": composer, "values": composer.initial(changes), "errors": {},
            **roles(request, run.project),
            "fork_link": _fork_link(request, run, composer.seq, changes or [])}


def _fork_link(request: HttpRequest, run: Run, seq: int, changes: list[Change]) -> str:
    url = f"{reverse('compose', args=[run.id])}?at={seq}"
    if changes:
        url += f"&changes={encode_changes(changes)}"
    return request.build_absolute_uri(url)


@login_required
@require_http_methods(["GET", "POST"])
@page_errors
def compose(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    """GET: the composer (a page, or the partial for htmx). POST: start the fork."""
    if request.method == "POST":
        return refused_in_place(request, "web/composer.html#refused", run_id,
                                lambda: _submit(request, forkable_run(request, run_id)))
    run = forkable_run(request, run_id)
    if not run.finished:
        return _refused(request, run, 409, f"This run has not finished (it is {run.status}): "
                        "a fork starts from a finished run's log. Watch it live and fork it "
                        "once it ends.")
    at = int_param(request.GET.get("at"))
    if at is None and request.GET.get("at", "") != "":
        return _refused(request, run, 400, "This fork link is damaged: its point "
                        f"at={request.GET['at'][:40]!r} is not a seq number.")
    changes: list[Change] = []
    if request.GET.get("changes"):
        try:
            changes = decode_changes(request.GET["changes"])
        except ValueError as exc:
            return _refused(request, run, 400, f"This fork link is damaged: {exc}. Ask for the "
                            "link again, or open the composer without its changes.", at=at)
    at_call = request.GET.get("call", "")
    if at_call and parse_call_key(at_call) is None:
        return _refused(request, run, 400, f"This fork link is damaged: call={at_call[:80]!r} "
                        "is not a call key (node#occurrence/turn:N).", at=at)
    if run.trace_id:  # forked before one call, never at a node point (SPEC §8)
        if not at_call:
            return _refused(request, run, 422, node_point_refusal(run).message,
                            calls=imported_forks_of(run, forkable=True))
        return _compose_call(request, run, at_call, at, changes)
    tl = timeline.build(run, at=at)
    try:
        context = composer_context(request, run, at, changes=changes, tl=tl)
    except NotFound as exc:
        return _refused(request, run, 404, exc.message)
    composer = context["composer"]
    point = tl.point(composer.seq)
    context["values"]["at_call"] = at_call  # set: the fork starts right before this call
    context.update(run=run, from_link=bool(changes), point=point,
                   inspector=inspector(run, composer.seq, point, composer.graph))
    template = "web/composer.html#composer" if htmx_target(request) else "web/fork_page.html"
    return render(request, template, context)


def _compose_call(request: HttpRequest, run: Run, key: str, at: int | None,
                  changes: list[Change]) -> HttpResponse:
    """The composer before call ``key`` of imported run ``run``; a fork link's changes
    travel in the free-form list (each names its call)."""
    composer = _call_composer(run, key, at)
    values = composer.initial()
    if changes:
        values["extra_changes"] = json.dumps([c.wire() for c in changes], indent=2,
                                             ensure_ascii=False, sort_keys=True)
    context: dict[str, Any] = {
               "run": run, "composer": composer, "values": values, "errors": {},
               "from_link": bool(changes), **roles(request, run.project),
               "fork_link": _call_link(request, run, composer, changes)}
    if composer.seq is not None and composer.mode == "one_call":
        tl = timeline.build(run, at=composer.seq)
        if composer.seq in tl.points:
            point = tl.point(composer.seq)
            context.update(point=point, inspector=inspector(run, composer.seq, point, None))
    template = "web/composer.html#composer" if htmx_target(request) else "web/fork_page.html"
    return render(request, template, context)


def _call_link(request: HttpRequest, run: Run, composer: CallComposer,
               changes: list[Change]) -> str:
    query: dict[str, Any] = {"call": composer.key}
    if composer.seq is not None:
        query["at"] = composer.seq
    if changes:
        query["changes"] = encode_changes(changes)
    return request.build_absolute_uri(f"{reverse('compose', args=[run.id])}?{urlencode(query)}")


def _link_of(request: HttpRequest, run: Run, composer: Composer | CallComposer,
             changes: list[Change]) -> str:
    if isinstance(composer, CallComposer):
        return _call_link(request, run, composer, changes)
    return _fork_link(request, run, composer.seq, changes)


def _refused(request: HttpRequest, run: Run, status: int, message: str, *,
             at: int | None = None, calls: Any = None) -> HttpResponse:
    """The fork page with only the reason no composer opens (and where to go instead:
    ``calls``, an imported run's call points)."""
    return render(request, "web/fork_page.html",
                  {"run": run, "point_error": message, "retry_at": at, "imported": calls},
                  status=status)


def refused_in_place(request: HttpRequest, partial: str, run_id: str,
                     answer: Callable[[], HttpResponse]) -> HttpResponse:
    """``answer()``; for an htmx post, a refusal escaping it (a point that is no fork point,
    a role lost since the page loaded, a run gone) is ``partial`` with its message, status
    422 — the one 4xx htmx swaps (base.html's htmx-config), so the form shows why instead of
    staying as it was. A plain post gets the error page at the code's status (page_errors).
    """
    try:
        return answer()
    except ForklabError as exc:
        if not getattr(request, "htmx", False):
            raise
        return render(request, partial, {"message": exc.message, "code": exc.code,
                                         "run_id": run_id}, status=422)


def _posted_point(request: HttpRequest) -> int | None:
    """The ``at`` a composer posts (its hidden field); a damaged one is refused, never
    replaced by the first point (a fork started where nobody asked)."""
    text = request.POST.get("at", "")
    return parse_seq(text, name="at") if text != "" else None


def _posted_composer(request: HttpRequest, run: Run) -> tuple[Composer | CallComposer,
                                                               ForkForm]:
    """The composer a post came from and the fork it describes: before one call of an
    imported run (``at_call``), else at the posted point. A mapped imported run posted at a
    node point is refused here: its seq is no point of the workflow base's log (an unmapped
    one is refused by the engine, ``one_call_only``, listing its replayable calls)."""
    at_call = request.POST.get("at_call", "").strip()
    if run.trace_id and at_call:
        call = _call_composer(run, at_call, int_param(request.POST.get("at")))
        return call, read_call_form(call, request.POST)
    composer = _composer(run, _posted_point(request))
    form = read_fork_form(composer, request.POST)
    if run.trace_id and imported_forks.mapped(run) is not None:
        form.refuse(node_point_refusal(run))
    return composer, form


def _submit(request: HtmxHttpRequest, run: Run) -> HttpResponse:
    composer, form = _posted_composer(request, run)
    if not form.errors:
        try:
            started = forking.start_fork(user=request.user, spec=form.spec())
        except ForklabError as exc:
            form.refuse(exc)
        else:
            url = reverse("live", args=[started.run.id])
            return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    context = {"run": run, "composer": composer, "values": _posted(request, composer),
               "errors": form.errors, **composer.folded_errors(form.errors),
               **roles(request, run.project),
               "fork_link": _link_of(request, run, composer, form.changes)}
    template = "web/composer.html#composer" if request.htmx else "web/fork_page.html"
    return render(request, template, context, status=422)


def _posted(request: HttpRequest, composer: Composer | CallComposer) -> dict[str, Any]:
    """The submitted values, to show the form again as it was sent."""
    if isinstance(composer, CallComposer):
        return composer.posted(request.POST)
    values = composer.initial()
    for name in values:
        if name in request.POST:
            values[name] = request.POST[name]
        elif name in ("memoize", "ignore_budget", "route_once"):
            values[name] = False
    for name in ("memoize", "ignore_budget", "route_once"):
        values[name] = values[name] in (True, "on")
    values["at_call"] = request.POST.get("at_call", "")
    return values


@login_required
@require_POST
@page_errors
def preflight(request: HttpRequest, run_id: str) -> HttpResponse:
    """What the composed fork would do and cost (``forking.preflight``); starts nothing.

    The answer carries the estimate and, out of band, every field's error slot, so an error
    appears next to the field that caused it and disappears once fixed.
    """
    return refused_in_place(request, "web/composer.html#preflight-refused", run_id,
                            lambda: _preflight(request, forkable_run(request, run_id)))


def _preflight(request: HttpRequest, run: Run) -> HttpResponse:
    composer, form = _posted_composer(request, run)
    result: PreflightWire | None = None
    if not form.errors:
        try:
            result = forking.preflight(user=request.user, spec=form.spec())
        except ForklabError as exc:
            form.refuse(exc)
    return render(request, "web/composer.html#preflight-response", {
        "run": run, "composer": composer, "result": result, "errors": form.errors,
        "described": _described(form), "fork_link": _link_of(request, run, composer, form.changes),
        "notices": empty_prompts(form),
    })


def empty_prompts(form: ForkForm) -> list[str]:
    """A prompt emptied in the form is allowed, but almost never meant: say so."""
    return [f"The system prompt of {c.target!r} is empty: the agent gets no "
            "instructions at all. Undo the edit if that was not intended."
            for c in form.changes if isinstance(c, PromptChange) and
            not c.system_prompt.strip()]


def _described(form: ForkForm) -> list[str]:
    return [change.describe() for change in form.changes]
