"""``/graphs/``: list, register (a new version when the spec changed) and read graphs."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from forklab.api.inputs import (
    GraphFilters,
    GraphLookup,
    GraphRegistration,
    body,
)
from forklab.api.pagination import Pages
from forklab.api.schema import LIST, WRITE, path_id, responses
from forklab.api.serializers import (
    GraphDetailSerializer,
    GraphPageSerializer,
    GraphRegisteredSerializer,
    GraphSerializer,
)
from forklab.runs import queries, services
from forklab.runs.models import Graph
from forklab.runs.serializers_json import iso


def graph_json(graph: Graph, *, versions: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": graph.pk, "project": graph.project.slug, "graph_id": graph.graph_id,
        "name": graph.name, "latest_version": getattr(graph, "latest_version", None) or 0,
        "created_at": iso(graph.created_at)}
    if versions:
        data["versions"] = [
            {"version": v.version, "spec_hash": v.spec_hash, "created_at": iso(v.created_at),
             "spec": v.spec} for v in graph.versions.order_by("version")]
        data["latest_version"] = data["versions"][-1]["version"] if data["versions"] else 0
    return data


@extend_schema(methods=["GET"], operation_id="graphs_list", parameters=[GraphFilters],
               summary="List graphs", responses=responses({200: GraphPageSerializer}, *LIST))
@extend_schema(
    methods=["POST"], operation_id="graphs_create", request=GraphRegistration,
    summary="Register a graph",
    description="`{\"project\": slug, \"spec\": {…graph…}}`. The spec is validated by the "
                "engine (400 `invalid_graph` names the node and field). A spec equal to the "
                "latest version answers 200 with that version; otherwise a new version is "
                "stored (201; version 1 for a new graph id). `project` may be omitted when "
                "you are admin of exactly one project. Needs the admin role.",
    responses=responses({
        201: OpenApiResponse(GraphRegisteredSerializer, description="A new version."),
        200: OpenApiResponse(GraphRegisteredSerializer, description="Unchanged: the spec "
                                                                    "equals the latest."),
    }, *WRITE))
@api_view(["GET", "POST"])
def graphs(request: Request) -> Response:
    if request.method == "POST":
        spec = body(GraphRegistration, request.data)
        registered = services.register_graph(user=request.user, project=spec.project,
                                             spec=spec.spec)
        graph = registered.version.graph
        data = {**graph_json(graph, versions=True),
                "registered_version": registered.version.version,
                "created": registered.created}
        code = status.HTTP_201_CREATED if registered.created else status.HTTP_200_OK
        return Response(GraphRegisteredSerializer(data).data, status=code)
    filters = GraphFilters.read(request.query_params)
    pages = Pages()
    page = pages.paginate_queryset(queries.list_graphs(request.user, **filters), request)
    return pages.get_paginated_response(
        GraphSerializer([graph_json(g) for g in page or []], many=True).data)


@extend_schema(
    operation_id="graphs_retrieve",
    parameters=[path_id("key", "the graph's numeric id, or its graph id"), GraphLookup],
    summary="A graph with its versions",
    responses=responses({200: GraphDetailSerializer}, 400, 401, 404))
@api_view(["GET"])
def graph_detail(request: Request, key: str) -> Response:
    lookup = GraphLookup.read(request.query_params)
    graph = queries.get_graph(request.user, key, project=lookup.get("project"))
    return Response(GraphDetailSerializer(graph_json(graph, versions=True)).data)
