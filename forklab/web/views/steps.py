"""The step drawer: one node execution in full (``/runs/<id>/steps/<node>/<occurrence>/``), and
in the diff an aligned step's two executions side by side
(``/compare/<base>/<variant>/steps/<index>/``). Each is a page of its own (a permalink) and,
for htmx, the ``drawer`` partial the run, live and diff pages open beside their content.
Share links read the same through ``/s/<token>/…``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from forklab.runs import conversations, queries, sharing
from forklab.runs import steps as step_reads
from forklab.runs.errors import NotFound
from forklab.runs.models import Run, ShareLink
from forklab.runs.serializers_json import imported_calls
from forklab.web import steppair
from forklab.web.conversation import ThreadView, thread_view
from forklab.web.steps import Context, Step, build, mark_imported
from forklab.web.views.common import htmx_target, page_errors, roles


def context_of(run: Run) -> Context:
    """What a label's reason needs: is it a fork, which nodes its changes name."""
    targeted = set()
    for change in run.fork_mutations or []:
        for key in ("target", "node", "from"):
            if change.get(key):
                targeted.add(str(change[key]).split(".")[0].split("[")[0])
    return Context(is_fork=bool(run.parent_run_id), targeted=frozenset(targeted))


def load_step(run: Run, node: str, occurrence: int) -> Step | None:
    where = step_reads.locate(run, node, occurrence)
    if where is None:
        return None
    events = step_reads.events(where)
    if not events:
        return None
    step = build(events, run_id=where.run_id, context=context_of(run),
                 inherited_from=where.inherited_from)
    imported = imported_calls(where.run_id)
    if imported is not None:
        mark_imported(step, imported)
    return step


def conversation_of(run: Run, step: Step, *, forkable: bool) -> ThreadView | None:
    """The agent execution's conversation thread (None for other kinds)."""
    if step.kind not in ("agent", "router"):
        return None
    thread = conversations.conversation(run, step.node, step.occurrence)
    return None if thread is None else thread_view(thread, run, point=step.before_point,
                                                   forkable=forkable)


def _render(request: HttpRequest, template: str, context: dict[str, Any]) -> HttpResponse:
    partial = htmx_target(request) == "drawer"
    return render(request, f"{template}#drawer" if partial else template, context)


def _step_response(request: HttpRequest, run: Run, node: str, occurrence: int, *,
                   readonly: bool, share: ShareLink | None = None) -> HttpResponse:
    step = load_step(run, node, occurrence)
    if step is None:
        raise NotFound(f"{node!r} has no execution {occurrence} in run {run.id!r}",
                       node=node, occurrence=occurrence)
    access = {"can_fork": False, "is_admin": False} if readonly else roles(request,
                                                                           run.project)
    # a one-call fork is not forked again (one_call_only): nothing of it is offered
    forkable = run.finished and access["can_fork"] and not step.inherited_from and (
        queries.one_call(run) is None)
    return _render(request, "web/step.html", {
        "run": run, "step": step, "readonly": readonly, "share": share, **access,
        "forkable": forkable, "imported": bool(run.trace_id),
        "conversation": conversation_of(run, step, forkable=bool(forkable))})


@login_required
@require_GET
@page_errors
def step(request: HttpRequest, run_id: str, node: str, occurrence: int) -> HttpResponse:
    run = queries.get_run(run_id, user=request.user)
    return _step_response(request, run, node, occurrence, readonly=False)


@require_GET
@page_errors
def shared_step(request: HttpRequest, token: str, run_id: str, node: str,
                occurrence: int) -> HttpResponse:
    link = sharing.resolve_share(token)
    run = sharing.shared_run(link, run_id)
    return _step_response(request, run, node, occurrence, readonly=True, share=link)


def _pair_response(request: HttpRequest, base: Run, variant: Run, index: int, *,
                   readonly: bool, share: ShareLink | None = None) -> HttpResponse:
    aligned = [] if not (base.last_seq and variant.last_seq) else \
        queries.compare_runs(base, variant).diff.path.aligned
    if not 0 <= index < len(aligned):
        raise NotFound(f"the diff has no step {index + 1}; it aligns {len(aligned)} steps",
                       index=index)
    entry = aligned[index]
    sides = {}
    for side, run in (("base", base), ("variant", variant)):
        where = getattr(entry, side)
        sides[side] = load_step(run, where.node, where.occurrence) if where else None
    return _render(request, "web/compare_step.html", {
        "base": base, "variant": variant, "index": index, "entry": entry, "readonly": readonly,
        "share": share, "pairs": steppair.pair(sides["base"], sides["variant"]),
        "base_step": sides["base"], "variant_step": sides["variant"],
        "prev": index - 1 if index else None,
        "next": index + 1 if index + 1 < len(aligned) else None})


@login_required
@require_GET
@page_errors
def compare_step(request: HttpRequest, base_id: str, variant_id: str,
                 index: int) -> HttpResponse:
    base = queries.get_run(base_id, user=request.user)
    variant = queries.get_run(variant_id, user=request.user)
    return _pair_response(request, base, variant, index, readonly=False)


@require_GET
@page_errors
def shared_compare_step(request: HttpRequest, token: str, base_id: str, variant_id: str,
                        index: int) -> HttpResponse:
    link = sharing.resolve_share(token)
    base, variant = sharing.shared_run(link, base_id), sharing.shared_run(link, variant_id)
    return _pair_response(request, base, variant, index, readonly=True, share=link)
