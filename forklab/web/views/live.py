"""The live fork view: the tail streams in over the websocket (htmx ws extension), with
cancel while it runs, approve / reject / edit while a gate pauses it, and the diff once done.
The answer itself is posted to ``views.answers.answer``, which the run page's live section
uses too (the gate's question, :func:`pending_gate`, and its form, ``web/_gate_answer.html``,
are the same on both pages).

The page renders the events recorded so far and connects with ``after=`` the last of them;
a finished run shows them too, and the stream's status frame then turns the page into the diff;
``forklab/web/static/forklab.js`` moves ``after=`` to the last row received before any reconnect, so a
dropped socket loses nothing and repeats nothing. Every status frame of the stream asks this
view for the control panel again (``#fork-panel``): a finished run answers with a redirect
to its diff.

The run page of an unfinished run streams the same way (``web/_run_live.html``, from
:func:`last_events`); its status frames ask this view for ``#run-live``, and the answer
reloads that page.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect, HttpResponseClientRefresh

from forklab.engine.answers import answer_keys
from forklab.engine.errors import ForklabError
from forklab.engine.reused_form import expand_all
from forklab.runs import forking, queries
from forklab.runs.models import Event, Run
from forklab.runs.serializers_json import event_to_json
from forklab.web.composer import pretty
from forklab.web.views.common import HtmxHttpRequest, htmx_target, page_errors, roles

BACKLOG_ROWS = 500


def done_url(run: Run) -> str:
    """Where a finished run is read: its diff against its base, or its own page."""
    if run.parent_run_id and Run.objects.filter(pk=run.parent_run_id).exists():
        return reverse("compare", args=[run.parent_run_id, run.id])
    return reverse("run", args=[run.id])


@login_required
@require_GET
@page_errors
def live(request: HttpRequest, run_id: str) -> HttpResponse:
    """The fork live view. A run that is no fork has no such view (the API's fork endpoint
    is ``not_found`` for it): the address leads to the run's own page, its permalink
    (SPEC §4.5), so an old or hand-made link still arrives somewhere useful."""
    run = queries.get_run(run_id, user=request.user)
    if htmx_target(request) == "run-live":
        # a status frame on the run page of an unfinished run: the page reloads into the
        # status reported (a finished run's page, its timeline complete, opens no stream)
        return HttpResponseClientRefresh()
    if not run.is_fork:
        url = reverse("run", args=[run.id])
        return HttpResponseClientRedirect(url) if htmx_target(request) else redirect(url)
    never_ran = bool((run.error or {}).get("not_run"))
    if htmx_target(request) == "fork-panel":
        if run.finished and not never_ran:
            return HttpResponseClientRedirect(done_url(run))
        return render(request, "web/live.html#panel", live_context(request, run))
    return render(request, "web/live.html", live_context(request, run, backlog=True))


def live_context(request: HttpRequest, run: Run, *, backlog: bool = False, error: str = "",
                 error_code: str = "") -> dict[str, Any]:
    """What the fork live view shows (``backlog``: the whole page, else its panel); ``error``
    and its ``error_code``: why the last cancel or answer was refused."""
    context: dict[str, Any] = {"run": run, **roles(request, run.project), "error": error,
                               "error_code": error_code,
                               "forked": queries.forked_point(run.id),
                               "pending": pending_gate(run)}
    if backlog:
        tail = last_events(run)
        context.update(tail, summary=tail_summary(tail["backlog"]))
    return context


def last_events(run: Run, rows: int = BACKLOG_ROWS) -> dict[str, Any]:
    """What a page streaming ``run`` starts from: its last ``rows`` events (``backlog``, in
    seq order), the seq its stream connects after (``after``: the last of them, so the
    stream sends each later event once) and how many earlier ones it leaves out
    (``skipped``)."""
    found = list(Event.objects.filter(run_id=run.id).order_by("-seq")[:rows])[::-1]
    return {"backlog": [event_to_json(e) for e in found],
            "after": found[-1].seq if found else 0,
            "skipped": max(0, (found[0].seq - 1) if found else 0)}


def tail_summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Nodes finished, model calls, tokens and incurred cost of the events shown; the page's
    script keeps the same sums as rows stream in (``forklab/web/static/forklab.js``)."""
    events = expand_all(events)  # a served node counts as its calls and its completion
    calls = [e["payload"] for e in events if e["type"] == "agent.responded"]
    return {
        "nodes": sum(1 for e in events if e["type"] == "node.completed"),
        "calls": len(calls),
        "tokens": sum(int(c.get("input_tokens", 0)) + int(c.get("output_tokens", 0))
                      for c in calls),
        "incurred": sum(float(c.get("cost_usd") or 0) for c in calls
                        if c.get("label") in ("live", "changed")),
    }


def pending_gate(run: Run) -> dict[str, Any] | None:
    """The question a paused run waits on (its last ``human.requested``): the gate's
    ``node``, ``prompt`` and ``context`` (what it shows the approver; ``context_text``
    pretty-printed), ``answer_keys`` (the memory keys an answer may set) and ``answered``
    (the answer stored for this gate and not applied yet, else None: the run resumes with
    it, and a second one would be ``already_answered``). None unless the run is paused."""
    if run.status != "paused":
        return None
    event = (Event.objects.filter(run_id=run.id, type="human.requested")
             .order_by("-seq").values("node", "payload").first())
    if event is None:
        return None
    payload = event["payload"] or {}
    gate = queries.waiting_gate(run)
    work = run.work or {}
    stored = work.get("answer") if (work.get("task") == "answer"
                                    and work.get("at_seq") == run.last_seq) else None
    return {"node": event["node"], **payload,
            "context_text": pretty(payload["context"]) if payload.get("context") else "",
            # the memory keys an answer may set (the gate's writes after its decision key)
            "answer_keys": answer_keys(gate) if gate is not None else [],
            "answered": stored}


@login_required
@require_POST
@page_errors
def cancel(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    error = code = ""
    try:
        run = forking.cancel(user=request.user, run_id=run_id)
    except ForklabError as exc:
        if exc.code in ("not_found", "permission_denied"):
            raise
        run, error, code = queries.get_run(run_id, user=request.user), exc.message, exc.code
    return panel_or_page(request, run, error, code)


def panel_or_page(request: HtmxHttpRequest, run: Run, error: str = "", error_code: str = "",
                  answered: bool = False,
                  answer_values: dict[str, str] | None = None) -> HttpResponse:
    """After a cancel or an answer posted from the fork live view: for htmx its panel
    (status 422 with a refusal: the one 4xx htmx swaps; ``answer_values``: a refused
    answer's fields as typed), else a redirect to the page."""
    if request.htmx:
        run.refresh_from_db()
        context = live_context(request, run, error=error, error_code=error_code)
        context.update(answered=answered, answer_values=answer_values or {})
        return render(request, "web/live.html#panel", context, status=422 if error else 200)
    return redirect(reverse("live", args=[run.id]))
