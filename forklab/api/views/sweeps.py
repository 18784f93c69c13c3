"""``/sweeps/`` and ``/diff/``: many variants of one fork point, and comparing two runs."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from forklab.api.inputs import DiffQuery, body
from forklab.api.schema import FORK_WRITE, READ, path_id, responses
from forklab.engine.fork.wire import RunDiffWire, SweepEstimateWire, SweepWire
from forklab.runs import forking
from forklab.runs.specs import SweepSpec

SWEEP_ID = path_id("group_id", "the sweep's fork group id")


@extend_schema(
    operation_id="sweeps_estimate", request=SweepSpec, summary="Estimate a sweep",
    description="Predicts each variant's live calls, tokens and cost; starts nothing. A "
                "variant whose change does not resolve fails the whole request (422).",
    responses=responses({200: SweepEstimateWire}, *FORK_WRITE))
@api_view(["POST"])
def sweep_estimate(request: Request) -> Response:
    estimate = forking.estimate_sweep(user=request.user, spec=body(SweepSpec, request.data))
    return Response(estimate.to_wire())


@extend_schema(
    operation_id="sweeps_create", request=SweepSpec, summary="Start a sweep",
    description="One fork per named variant from the same run and point, sharing a "
                "`fork_group_id`; every variant is validated before any starts. They run in "
                "the background: poll `GET /sweeps/{fork_group_id}/`.",
    responses=responses({202: SweepWire}, *FORK_WRITE))
@api_view(["POST"])
def sweeps(request: Request) -> Response:
    group = forking.start_sweep(user=request.user, spec=body(SweepSpec, request.data))
    detail = forking.sweep_summary(user=request.user, group_id=group)
    return Response(detail.to_wire(), status=status.HTTP_202_ACCEPTED)


@extend_schema(
    operation_id="sweeps_retrieve", parameters=[SWEEP_ID], summary="A sweep's variants",
    description="Each variant's status, run id and incurred cost, and a diff summary once "
                "it finished.",
    responses=responses({200: SweepWire}, *READ, 405))
@api_view(["GET"])
def sweep_detail(request: Request, group_id: str) -> Response:
    return Response(forking.sweep_summary(user=request.user, group_id=group_id).to_wire())


@extend_schema(
    operation_id="diff", parameters=[DiffQuery], summary="Compare two runs",
    description="The RunDiff of any two runs you can read (base first).",
    responses=responses({200: RunDiffWire}, 400, *READ))
@api_view(["GET"])
def diff(request: Request) -> Response:
    query = DiffQuery.read(request.query_params)
    return Response(forking.diff(
        user=request.user, base_id=query["base"], variant_id=query["variant"]).to_wire())
