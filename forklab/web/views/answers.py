"""Answering the approval gate a paused run waits at, from the dashboard.

One view for every paused run — a fork or a primary run recorded through the API or the CLI —
and for both pages that show the question: the fork live view's panel (``#fork-panel``) and
the run page's live section (``#run-gate``, ``web/_run_live.html``). Both include the same
form (``web/_gate_answer.html``), and the answer goes through the one use case,
``forklab.runs.control.answer``: it checks the role, refuses ``memory_updates`` setting a key
the gate does not declare (``invalid_overrides``, nothing stored), stores the answer and
queues the work that applies it.

A viewer's post is refused before its fields are read (the 403 page, nothing stored); any
other refusal — a field that is not JSON, an undeclared key, a run no longer paused, a gate
already answered — is shown in the form that sent it, in words and with its stable code,
status 422 (the one 4xx htmx swaps), nothing stored.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from forklab.engine import inputs
from forklab.engine.errors import ForklabError
from forklab.runs import control, queries
from forklab.runs.models import Run
from forklab.runs.specs import AnswerSpec, parse
from forklab.web.views import live, runs
from forklab.web.views.common import HtmxHttpRequest, htmx_target, page_errors, roles

#: the run page's element an answer replaces (the live view's is ``#fork-panel``)
RUN_GATE = "run-gate"
#: the form's JSON fields, as the form labels them
JSON_FIELDS = {"data": "Edited data", "memory_updates": "Memory updates"}
#: the code of a field that is not JSON (what the API answers for a body that is not)
NOT_JSON = "parse_error"


class FieldNotJSON(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@login_required
@require_POST
@page_errors
def answer(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    """Approve, reject or edit the gate a paused run waits at."""
    run = queries.get_run(run_id, user=request.user)  # not_found outside one's projects
    # the role first: a viewer's post is refused whatever its fields hold
    control.require_answerer(request.user, run)
    on_run_page = (htmx_target(request) or request.POST.get("target")) == RUN_GATE
    error = code = ""
    try:
        run = control.answer(user=request.user, run_id=run_id,
                             spec=parse(AnswerSpec, answer_body(request.POST)))
    except FieldNotJSON as exc:
        error, code = exc.message, NOT_JSON
    except ForklabError as exc:
        if exc.code in ("not_found", "permission_denied"):
            raise
        error, code = exc.message, exc.code
    if not on_run_page and run.is_fork:
        if request.htmx or not error:
            return live.panel_or_page(request, run, error, code, answered=not error,
                                      answer_values=answer_values(request.POST))
        run.refresh_from_db()
        context = live.live_context(request, run, backlog=True, error=error, error_code=code)
        context["answer_values"] = answer_values(request.POST)
        return render(request, "web/live.html", context, status=422)
    return _on_run_page(request, run, error, code)


def answer_body(post: QueryDict) -> dict[str, Any]:
    """The answer the form sent, its JSON fields parsed under the edge checks every JSON
    input passes (``FieldNotJSON`` for one that is not JSON; NaN, depth and size:
    ``invalid_input``)."""
    body: dict[str, Any] = {"decision": post.get("decision", "")}
    for name, label in JSON_FIELDS.items():
        text = post.get(name, "").strip()
        if not text:
            continue
        try:
            body[name] = inputs.loads(text, where=name)
        except json.JSONDecodeError as exc:
            raise FieldNotJSON(f"{label} ({name}) is not valid JSON: {exc.msg} (line "
                               f"{exc.lineno}, column {exc.colno}); nothing was sent") from None
    return body


def answer_values(post: QueryDict) -> dict[str, str]:
    """The JSON fields as typed, for the form to show again with its refusal."""
    return {name: post.get(name, "") for name in JSON_FIELDS}


def _on_run_page(request: HtmxHttpRequest, run: Run, error: str, code: str) -> HttpResponse:
    """For htmx the run page's gate section; else the run page (a redirect to it when
    nothing was refused, the page with the refusal in its form otherwise)."""
    if not request.htmx and not error:
        return redirect(reverse("run", args=[run.id]))
    run.refresh_from_db()
    gate = {"pending": live.pending_gate(run), "error": error, "error_code": code,
            "answered": not error, "answer_values": answer_values(request.POST)}
    if request.htmx:
        context = {"run": run, **roles(request, run.project), **gate, "heading_oob": True}
        return render(request, "web/_run_live.html#gate", context, status=422 if error else 200)
    context = runs.page_context(request, run)
    context.update(gate)
    return render(request, "web/run.html", context, status=422)
