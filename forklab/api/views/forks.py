"""``/forks/``: preflight, start (idempotent by ``client_request_id``), read, cancel, answer,
promote and save as a case."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from forklab.api.inputs import NoFields, PromoteFields, body
from forklab.api.rendering import view_response
from forklab.api.schema import ANSWER_REFUSALS, FORK_WRITE, READ, WRITE, path_id, responses
from forklab.api.serializers import (
    CaseSerializer,
    ForkSerializer,
    PromoteSerializer,
)
from forklab.api.views.cases import case_json
from forklab.engine.fork.wire import PreflightWire
from forklab.runs import control, forking, readmodel
from forklab.runs.specs import AnswerSpec, CaseSpec, ForkSpec

FORK_ID = path_id("run_id", "the fork's run id")


@extend_schema(
    operation_id="forks_preflight", request=ForkSpec, summary="Preflight a fork",
    description="Resolve the fork point, validate the changes and estimate the tail; starts "
                "nothing. Same body and same errors as `POST /forks/`.",
    responses=responses({200: PreflightWire}, *FORK_WRITE))
@api_view(["POST"])
def preflight(request: Request) -> Response:
    plan = forking.preflight(user=request.user, spec=body(ForkSpec, request.data))
    return Response(plan.to_wire())


@extend_schema(
    operation_id="forks_create", request=ForkSpec, summary="Start a fork",
    description="Validates everything first (nothing is written for a bad request), records "
                "the queued fork run and runs its tail in the background. The same "
                "`client_request_id` again answers 200 with the existing fork. Members fork "
                "within the default budgets; allowing a write, raising or clearing a budget "
                "or `ignore_budget` needs an admin. A base run that is not finished: 409 "
                "`run_in_progress`.",
    responses=responses({
        202: OpenApiResponse(ForkSerializer, description="Started."),
        200: OpenApiResponse(ForkSerializer, description="This client_request_id was seen "
                                                         "before: the existing fork."),
    }, *FORK_WRITE))
@api_view(["POST"])
def forks(request: Request) -> Response:
    started = forking.start_fork(user=request.user, spec=body(ForkSpec, request.data))
    code = status.HTTP_202_ACCEPTED if started.created else status.HTTP_200_OK
    return Response(ForkSerializer(readmodel.view(started.run)).data, status=code)


@extend_schema(
    operation_id="forks_retrieve", parameters=[FORK_ID], summary="A fork's state and result",
    description="`state` is queued, running, paused, complete, failed, blocked, not_run (the "
                "request no longer fitted when the tail ran: `not_run_reason` is the error "
                "code) or cancelled. The Fork result fields (estimate, calls, diff, explain, "
                "…) are null until the fork finishes.",
    responses=responses({200: ForkSerializer}, *READ, 405))
@api_view(["GET"])
def fork_detail(request: Request, run_id: str) -> HttpResponse:
    # the read model's view; a finished fork's rendered body is kept with it
    view = readmodel.view(forking.get_fork(user=request.user, run_id=run_id))
    return view_response(view, "api.fork", lambda: ForkSerializer(view).data)


@extend_schema(
    operation_id="forks_cancel", parameters=[FORK_ID], request=NoFields, summary="Cancel a fork",
    description="A queued or paused fork is cancelled at once; a running one stops at its "
                "next node or call boundary (`cancel_requested`). A finished fork is left as "
                "it is. Needs the member role.",
    responses=responses({200: ForkSerializer}, 400, 401, 403, 404))
@api_view(["POST"])
def fork_cancel(request: Request, run_id: str) -> Response:
    forking.get_fork(user=request.user, run_id=run_id)  # 404 unless a readable fork
    body(NoFields, request.data)
    run = forking.cancel(user=request.user, run_id=run_id)
    return Response(ForkSerializer(readmodel.view(run)).data)


@extend_schema(
    operation_id="forks_answer", parameters=[FORK_ID], request=AnswerSpec,
    summary="Answer a paused fork's approval gate",
    description=f"The tail continues in the background. {ANSWER_REFUSALS}",
    responses=responses({202: ForkSerializer}, *WRITE, 409, 422))
@api_view(["POST"])
def fork_answer(request: Request, run_id: str) -> Response:
    control.require_answerer(request.user, forking.get_fork(user=request.user, run_id=run_id))
    spec = body(AnswerSpec, request.data)
    run = forking.answer(user=request.user, run_id=run_id, spec=spec)
    return Response(ForkSerializer(readmodel.view(run)).data, status=status.HTTP_202_ACCEPTED)


@extend_schema(
    operation_id="forks_promote", parameters=[FORK_ID], request=PromoteFields,
    summary="Promote a fork's config changes into its graph",
    description="A new version of the base run's graph with the fork's model, prompt, "
                "temperature and config changes; state changes are listed in `skipped`. "
                "Only changes the fork's tail applied are carried, so the promoted graph "
                "reproduces the fork when re-run. Needs the admin role. 409 "
                "`promote_conflict` when the graph gained a newer version touching the same "
                "fields, or (`reason: not_applied`) when a config change targets a node that "
                "ran before the fork point or never ran after it — `only_applied: true` "
                "leaves those out and lists them in `skipped`; `invalid_run_state` for a fork "
                "that never ran; 422 `invalid_change` when there is nothing to promote.",
    responses=responses({200: PromoteSerializer}, 400, 401, 403, 404, 409, 422))
@api_view(["POST"])
def fork_promote(request: Request, run_id: str) -> Response:
    forking.get_fork(user=request.user, run_id=run_id)
    spec = body(PromoteFields, request.data)
    promoted = forking.promote_fork(user=request.user, run_id=run_id,
                                    only_applied=spec.only_applied)
    return Response(PromoteSerializer(promoted.wire()).data)


@extend_schema(
    operation_id="forks_save_case", parameters=[FORK_ID], request=CaseSpec,
    summary="Save a finished fork as a case",
    description="Its edited inputs, changes and recorded tail, with optional pass criteria "
                "(conditions over final memory). 409 `case_exists` for a taken name, "
                "`run_in_progress` for a fork that has recorded nothing yet, "
                "`invalid_run_state` for one that never ran; 422 `invalid_change` for an "
                "unfinished fork.",
    responses=responses({201: CaseSerializer}, *WRITE, 409, 422))
@api_view(["POST"])
def fork_save_case(request: Request, run_id: str) -> Response:
    forking.get_fork(user=request.user, run_id=run_id)
    spec = body(CaseSpec, request.data)
    case = forking.save_fork_as_case(user=request.user, run_id=run_id, spec=spec)
    return Response(CaseSerializer(case_json(case)).data, status=status.HTTP_201_CREATED)
