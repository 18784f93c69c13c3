"""OpenAPI helpers: the documented error responses of each endpoint.

Every status an endpoint can answer is listed (the fuzz test fails on an undocumented one);
every error body is the ``Error`` component: ``{"code", "detail", ...context}``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from forklab.api.serializers import ErrorSerializer

ERROR_MEANING = {
    400: "Malformed request: body or query does not match the schema (invalid_request, "
         "parse_error), holds what cannot be stored — an unencodable string, NUL, NaN or "
         "Infinity, nesting or size over the limits (invalid_input) — or an invalid graph "
         "(invalid_graph, unknown_node, unbounded_cycle).",
    401: "Not authenticated (not_authenticated, authentication_failed).",
    403: "Your role in the project is too low (permission_denied).",
    404: "Unknown, or outside your projects (not_found).",
    405: "The id is the name of a POST-only endpoint beside it — `forks/preflight/`, "
         "`sweeps/estimate/` — not a fork or sweep (method_not_allowed).",
    409: "Conflicts with the current state (run_in_progress, invalid_run_state, "
         "already_answered, case_exists, promote_conflict).",
    415: "The body is not JSON (unsupported_media_type).",
    422: "Well formed, but the run cannot take it (fork_point_not_found, fork_point_mid_node, "
         "invalid_change, invalid_overrides, conflicting_changes, unpriced_model, "
         "live_budget_exceeded, write_not_allowed, prefix_diverged, version_skew, "
         "source_missing, replay_divergence, idempotency_conflict: a client_request_id "
         "reused with a different body).",
}

# 400 everywhere: a path or query holding NUL or an unencodable character is invalid_input
READ = (400, 401, 404)
LIST = (400, 401, 404)  # 404: a page past the end
WRITE = (400, 401, 403, 404, 415)
#: what both answer endpoints (a paused fork's, any paused run's) refuse, and how
ANSWER_REFUSALS = (
    "Needs the member role. 409 `invalid_run_state` unless the run is paused; 409 "
    "`already_answered` when its gate was answered already (the first answer wins); 422 "
    "`invalid_overrides` when `memory_updates` sets a key the gate does not declare after its "
    "decision key in `writes` (`field`: `memory_updates.<key>`, `expected`: the keys it "
    "accepts; nothing is stored).")
FORK_WRITE = (*WRITE, 409, 422)


def responses(ok: dict[int, Any], *errors: int) -> dict[int, Any]:
    """``ok`` (status → serializer or OpenApiResponse) plus the listed error statuses."""
    out: dict[int, Any] = dict(ok)
    for status in sorted(set(errors)):
        out[status] = OpenApiResponse(ErrorSerializer, description=ERROR_MEANING[status])
    return out


def path_id(name: str, description: str) -> OpenApiParameter:
    return OpenApiParameter(name, str, OpenApiParameter.PATH, description=description)


class WireFieldExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    """Documents a ``WireField`` as its engine wire model's component (one definition)."""

    target_class = "forklab.api.serializers.WireField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> Any:
        component = auto_schema.resolve_serializer(self.target.model, direction)
        return component.ref


def blank_query_means_absent(result: dict[str, Any], generator: Any, request: Any,
                             public: Any) -> dict[str, Any]:
    """Postprocessing hook: every optional query parameter says ``allowEmptyValue``.

    ``forklab.api.inputs.Query`` reads a blank optional parameter (``?after=``, as an HTML
    form sends it) as "not given", whatever its type; without the flag the schema claimed an
    integer parameter refuses ``?after=`` (the fuzz test's negative phase sent it and got
    the documented default, not a 400).
    """
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            for param in operation.get("parameters", []):
                if param.get("in") == "query" and not param.get("required"):
                    param["allowEmptyValue"] = True
    return result
