"""``/cases/``: saved cases, and replaying them as a regression suite."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from forklab.api.inputs import CaseFilters, CasesRunSpec, body
from forklab.api.pagination import Pages
from forklab.api.schema import LIST, responses
from forklab.api.serializers import CasePageSerializer, CaseSerializer, CasesRunSerializer
from forklab.runs import forking, queries
from forklab.runs.models import Case
from forklab.runs.serializers_json import iso


def case_json(case: Case) -> dict[str, Any]:
    version = case.graph_version
    return {"id": case.pk, "project": case.project.slug, "name": case.name,
            "source_run_id": case.source_run_id,
            "graph": version.graph.graph_id if version else None,
            "graph_version": version.version if version else None,
            "input": case.input, "changes": case.changes, "criteria": case.criteria,
            "created_at": iso(case.created_at)}


@extend_schema(operation_id="cases_list", parameters=[CaseFilters], summary="Saved cases",
               responses=responses({200: CasePageSerializer}, *LIST))
@api_view(["GET"])
def cases(request: Request) -> Response:
    filters = CaseFilters.read(request.query_params)
    pages = Pages()
    page = pages.paginate_queryset(queries.list_cases(request.user, **filters), request)
    return pages.get_paginated_response(
        CaseSerializer([case_json(c) for c in page or []], many=True).data)


@extend_schema(
    operation_id="cases_run", request=CasesRunSpec, summary="Replay cases",
    description="Replays every case you can read (or one project's) against its graph's "
                "current version (or `graph_version`), with the case's changes applied "
                "again and every call served from its recording, and checks its criteria; "
                "each result names the `graph_id` and `graph_version` it ran against. "
                "`passed` is false when any case failed; a case with no criteria only fails "
                "if it stops completing.",
    responses=responses({200: CasesRunSerializer}, 400, 401, 415))
@api_view(["POST"])
def cases_run(request: Request) -> Response:
    spec = body(CasesRunSpec, request.data)
    results = forking.run_cases(user=request.user, project=spec.project,
                                graph_version=spec.graph_version)
    failed = sum(1 for _, r in results if not r.passed)
    return Response(CasesRunSerializer({
        "passed": failed == 0, "total": len(results), "failed": failed,
        "results": [{"project": project, **r.wire()} for project, r in results]}).data)
