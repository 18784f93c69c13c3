"""``/runs/``: record a run in the background, list and read runs, their events, fork points
and forks."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from forklab.api.inputs import EventFilters, RunFilters, body
from forklab.api.pagination import Pages
from forklab.api.rendering import view_response
from forklab.api.schema import ANSWER_REFUSALS, LIST, READ, WRITE, path_id, responses
from forklab.api.serializers import (
    EventPageSerializer,
    ForkPointList,
    RunPageSerializer,
    RunSerializer,
)
from forklab.engine.traces.export import export_run
from forklab.runs import control, forking, queries, readmodel, services
from forklab.runs.models import Run
from forklab.runs.serializers_json import readable_payload, run_to_json, runs_to_json
from forklab.runs.specs import AnswerSpec, RunSpec
from forklab.runs.store import DjangoStore

RUN_ID = path_id("run_id", "run id")


def run_page(request: Request, runs: QuerySet[Run]) -> Response:
    pages = Pages()
    page = pages.paginate_queryset(runs, request)
    return pages.get_paginated_response(RunSerializer(runs_to_json(page or []),
                                                      many=True).data)


@extend_schema(
    methods=["GET"], operation_id="runs_list", parameters=[RunFilters],
    summary="List runs", description="Newest first; only runs of your projects.",
    responses=responses({200: RunPageSerializer}, *LIST))
@extend_schema(
    methods=["POST"], operation_id="runs_create", request=RunSpec,
    summary="Record a run",
    description="Queue a primary run of a registered graph (`graph` is its graph id; "
                "`project` when several of your projects have it). The run is recorded in "
                "the background: poll `GET /runs/{id}/`. Needs the member role.",
    # 422: a workflow outside FORKLAB_WORKFLOW_MODULES, or one that cannot be imported
    responses=responses({202: RunSerializer}, *WRITE, 422))
@api_view(["GET", "POST"])
def runs(request: Request) -> Response:
    if request.method == "POST":
        run = services.start_recording(user=request.user, spec=body(RunSpec, request.data))
        return Response(RunSerializer(run_to_json(run)).data, status=status.HTTP_202_ACCEPTED)
    filters = RunFilters.read(request.query_params)
    return run_page(request, queries.runs_for_user(request.user, **filters))


@extend_schema(methods=["GET"], operation_id="runs_retrieve", parameters=[RUN_ID],
               summary="One run", responses=responses({200: RunSerializer}, *READ))
@extend_schema(
    methods=["DELETE"], operation_id="runs_destroy", parameters=[RUN_ID], request=None,
    summary="Delete a run",
    description="Deletes a finished run with its events (its forks keep their own logs). "
                "Meant for runs an older version stored unreadable (`error.code` "
                "`unreadable`). Needs the admin role; 409 `run_in_progress` while it runs.",
    responses=responses({204: None}, 400, 401, 403, 404, 409))
@api_view(["GET", "DELETE"])
def run_detail(request: Request, run_id: str) -> HttpResponse:
    if request.method == "DELETE":
        services.delete_run(user=request.user, run_id=run_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
    view = readmodel.view(queries.get_run(run_id, user=request.user))
    return view_response(view, "api.run", lambda: RunSerializer(view.run_json).data)


@extend_schema(
    operation_id="runs_events", parameters=[RUN_ID, EventFilters], summary="A run's events",
    description="Ordered by seq. Page with `after` (the `next_after` of the previous page) "
                "and `limit`; `next` is that page's URL, null at the end.",
    responses=responses({200: EventPageSerializer}, 400, *READ))
@api_view(["GET"])
def run_events(request: Request, run_id: str) -> Response:
    run = queries.get_run(run_id, user=request.user)
    query = EventFilters.read(request.query_params)
    limit = query["limit"]
    events = queries.list_events(run, type=query.get("type"), after=query.get("after", 0),
                                 limit=limit + 1)
    more = len(events) > limit
    events = events[:limit]
    for event in events:  # a payload an older version stored unreadable never breaks a page
        event["payload"] = readable_payload(event["payload"])
    next_after = events[-1]["seq"] if more else None
    url = request.build_absolute_uri()
    page = {"results": events, "next_after": next_after, "last_seq": run.last_seq,
            "next": replace_query_param(url, "after", next_after) if more else None}
    return Response(EventPageSerializer(page).data)


@extend_schema(
    operation_id="runs_otlp", parameters=[RUN_ID], summary="A run as an OTLP trace",
    description="The run's nodes and calls as an OTLP JSON `ExportTraceServiceRequest` in "
                "the OpenTelemetry GenAI conventions (`chat {model}` and `execute_tool "
                "{tool}` spans with usage, call key and provenance label, and the messages); "
                "`POST /imports/` reads it back into an equal run.",
    responses=responses({200: dict}, *READ))
@api_view(["GET"])
def run_otlp(request: Request, run_id: str) -> Response:
    run = queries.get_run(run_id, user=request.user)
    store = DjangoStore(run.project)
    return Response(export_run(store.read(run.id), recording=store.read))


@extend_schema(
    operation_id="runs_fork_points", parameters=[RUN_ID], summary="A run's fork points",
    description="Every addressable boundary: before each node execution, and the end.",
    responses=responses({200: ForkPointList}, *READ))
@api_view(["GET"])
def run_fork_points(request: Request, run_id: str) -> Response:
    run = queries.get_run(run_id, user=request.user)
    points = forking.fork_points_of(run)
    return Response(ForkPointList.model_validate(points).model_dump(mode="json"))


@extend_schema(
    operation_id="runs_forks", parameters=[RUN_ID], summary="Forks of a run",
    description="Counterfactual runs whose base is this run, newest first.",
    responses=responses({200: RunPageSerializer}, *LIST))
@api_view(["GET"])
def run_forks(request: Request, run_id: str) -> Response:
    run = queries.get_run(run_id, user=request.user)
    return run_page(request, queries.forks_of(run))


@extend_schema(
    operation_id="runs_answer", parameters=[RUN_ID], request=AnswerSpec,
    summary="Answer a paused run's approval gate",
    description="A run recorded with `POST /runs/` (or any run, a fork too) that paused at "
                "an approval gate continues in the background with this answer, as "
                f"`POST /forks/{{id}}/answer/` does for a fork. {ANSWER_REFUSALS}",
    responses=responses({202: RunSerializer}, *WRITE, 409, 422))
@api_view(["POST"])
def run_answer(request: Request, run_id: str) -> Response:
    # 404 and 403 before the body is read
    control.require_answerer(request.user, queries.get_run(run_id, user=request.user))
    run = control.answer(user=request.user, run_id=run_id,
                         spec=body(AnswerSpec, request.data))
    return Response(RunSerializer(run_to_json(run)).data, status=status.HTTP_202_ACCEPTED)
