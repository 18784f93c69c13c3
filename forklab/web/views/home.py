"""The runs list (with filters, search, pagination), the project switcher and /healthz."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET

from forklab.runs import queries
from forklab.runs.errors import InvalidArgument, NotFound
from forklab.runs.imported_forks import WORKFLOW_BASE_PREFIX
from forklab.runs.models import Run, RunKind, RunStatus
from forklab.web.views.common import page_or_partial
from forklab.web.views.errors import error_page

PER_PAGE = 50
FILTERS = ("project", "graph", "status", "kind", "q")


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """Runs of the user's projects, newest first: filter by project, graph, status, kind;
    search labels (and id prefixes); 50 a page. Workflow bases only with ``bases=1``."""
    chosen = {name: request.GET.get(name, "").strip() for name in FILTERS}
    if "project" not in request.GET and request.session.get("project"):
        chosen["project"] = request.session["project"]
    projects = list(queries.visible_projects(request.user))
    if chosen["project"] not in {p.slug for p in projects}:
        chosen["project"] = ""
    # workflow bases (``wf-…``) are derived data, the frozen copies mapped imported runs are
    # forked from: hidden unless asked for (or searched by their id); the API lists them
    show_bases = request.GET.get("bases") == "1" or chosen["q"].startswith(
        WORKFLOW_BASE_PREFIX)
    error = ""
    try:
        runs = queries.search_runs(request.user, q=chosen["q"], project=chosen["project"],
                                   graph=chosen["graph"], status=chosen["status"],
                                   kind=chosen["kind"])
        if not show_bases:
            runs = runs.exclude(id__startswith=WORKFLOW_BASE_PREFIX)
        page = Paginator(runs, PER_PAGE).get_page(request.GET.get("page"))
    except InvalidArgument as exc:
        error, page = exc.message, Paginator([], PER_PAGE).get_page(1)
    return page_or_partial(request, "web/runs.html", {
        "page": page, "runs": grouped(list(page.object_list)), "chosen": chosen,
        "projects": projects,
        "graphs": queries.graph_slugs(request.user), "statuses": RunStatus.values(),
        "kinds": RunKind.values(), "error": error,
        "filtered": any(chosen[name] for name in ("graph", "status", "kind", "q")),
        "show_bases": show_bases,
    }, partials=("runs-table",))


def grouped(runs: list[Run]) -> list[tuple[Run, int]]:
    """The page's runs with each fork right under its base when the base is on the page too
    (forks of forks deeper), with their depth; the rest keep their place (newest first)."""
    on_page = {run.id for run in runs}
    children: dict[str, list[Run]] = {}
    for run in runs:
        if run.parent_run_id in on_page:
            children.setdefault(str(run.parent_run_id), []).append(run)
    out: list[tuple[Run, int]] = []

    def add(run: Run, depth: int) -> None:
        out.append((run, depth))
        for child in sorted(children.get(run.id, []), key=lambda r: (r.created_at, r.id)):
            add(child, depth + 1)

    for run in runs:
        if run.parent_run_id not in on_page:
            add(run, 0)
    return out


@login_required
@require_GET
def compare_pick(request: HttpRequest) -> HttpResponse:
    """The runs list's "Compare": two ticked runs → their diff (the base is the parent of the
    other if one is, else the older one)."""
    ids = list(dict.fromkeys(request.GET.getlist("run")))
    if len(ids) != 2:
        return error_page(request, 400, f"Tick exactly two runs to compare; you ticked "
                                        f"{len(ids)}. Go back to the runs list and try again.")
    try:
        a, b = (queries.get_run(run_id, user=request.user) for run_id in ids)
    except NotFound as exc:
        return error_page(request, 404, exc.message)
    if a.parent_run_id == b.id or (b.parent_run_id != a.id and
                                   (b.created_at, b.id) < (a.created_at, a.id)):
        a, b = b, a
    return redirect(reverse("compare", args=[a.id, b.id]))


@login_required
@require_GET
def switch_project(request: HttpRequest) -> HttpResponse:
    """Remember the chosen project (empty: all of them) and show its runs."""
    slug = request.GET.get("project", "")
    if slug and not queries.visible_projects(request.user).filter(slug=slug).exists():
        slug = ""
    request.session["project"] = slug
    return redirect(f"{reverse('home')}?{urlencode({'project': slug})}")


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness plus a database round trip; 503 when the database does not answer."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return JsonResponse({"status": "error", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok", "database": connection.vendor})
