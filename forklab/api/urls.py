"""The REST API (SPEC §4.3) under ``/api/v1/``, its OpenAPI schema and docs page.

Anything else under ``/api/`` answers a JSON ``not_found`` (never Django's HTML page); a
path missing its trailing slash is redirected for GET and HEAD, and named in the error for
other methods (a redirect would drop a POST body).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, include, path, re_path, resolve
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from forklab.api.errors import error_body
from forklab.api.views import cases, conversations, forks, graphs, otlp, runs, sweeps

app_name = "api"

v1 = [
    path("graphs/", graphs.graphs, name="graphs"),
    path("graphs/<str:key>/", graphs.graph_detail, name="graph"),
    path("runs/", runs.runs, name="runs"),
    path("runs/<str:run_id>/", runs.run_detail, name="run"),
    path("runs/<str:run_id>/events/", runs.run_events, name="run-events"),
    path("runs/<str:run_id>/fork-points/", runs.run_fork_points, name="run-fork-points"),
    path("runs/<str:run_id>/otlp/", runs.run_otlp, name="run-otlp"),
    path("runs/<str:run_id>/forks/", runs.run_forks, name="run-forks"),
    path("runs/<str:run_id>/conversation/", conversations.run_conversation,
         name="run-conversation"),
    path("runs/<str:run_id>/answer/", runs.run_answer, name="run-answer"),
    path("forks/", forks.forks, name="forks"),
    path("forks/preflight/", forks.preflight, name="fork-preflight"),
    path("forks/<str:run_id>/", forks.fork_detail, name="fork"),
    path("forks/<str:run_id>/cancel/", forks.fork_cancel, name="fork-cancel"),
    path("forks/<str:run_id>/answer/", forks.fork_answer, name="fork-answer"),
    path("forks/<str:run_id>/promote/", forks.fork_promote, name="fork-promote"),
    path("forks/<str:run_id>/save-case/", forks.fork_save_case, name="fork-save-case"),
    path("sweeps/", sweeps.sweeps, name="sweeps"),
    path("sweeps/estimate/", sweeps.sweep_estimate, name="sweep-estimate"),
    path("sweeps/<str:group_id>/", sweeps.sweep_detail, name="sweep"),
    path("diff/", sweeps.diff, name="diff"),
    path("cases/", cases.cases, name="cases"),
    path("cases/run/", cases.cases_run, name="cases-run"),
    path("imports/", otlp.imports, name="imports"),
]


@csrf_exempt  # it changes nothing: a POST without its slash gets this JSON 404, not Django's
# HTML CSRF page (API clients send tokens, not CSRF cookies)
def unknown(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Under /api/ but no endpoint: JSON 404 (or the slash redirect Django would do)."""
    if not request.path.endswith("/"):
        try:
            match = resolve(request.path + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not unknown:
            if request.method in ("GET", "HEAD"):
                query = request.META.get("QUERY_STRING", "")
                return HttpResponsePermanentRedirect(
                    request.path + "/" + (f"?{query}" if query else ""))
            return JsonResponse(error_body(
                "not_found", f"no endpoint {request.path}; API paths end in a slash: "
                             f"{request.path}/"), status=404)
    return JsonResponse(error_body("not_found", f"no endpoint {request.path}"), status=404)


urlpatterns = [
    path("v1/", include(v1)),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api:schema"), name="redoc"),
    re_path(r"^(?P<rest>.*)$", unknown),
]
