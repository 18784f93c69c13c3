"""The one map from a ``ForklabError`` code to an HTTP status, shared by the API and the
dashboard (both sit above ``runs``) so a refusal is the same status on every surface.

Statuses, chosen once for every endpoint and page:

- **400** the request is malformed: its body or query does not match the endpoint's schema
  (``invalid_request``, ``parse_error``), holds what no store can keep — an unencodable
  string, NUL, NaN or Infinity, nesting or size over the limits (``invalid_input``) — or the
  graph document it carries is invalid (``invalid_graph``, ``unknown_node``,
  ``unbounded_cycle``);
- **422** the request is well formed but the run it names cannot take it: the fork point,
  the changes, the budget or the side-effect policy do not fit that run, or replaying it fails;
  a ``client_request_id`` reused with a different body (``idempotency_conflict``);
- **401** not authenticated, **403** the role is too low, **404** unknown — or outside the
  user's projects (never 403 there), **409** a conflict with the current state (an
  unfinished run, a paused-only action, a gate already answered, a taken name, a promote
  race).
"""

from __future__ import annotations

BAD_REQUEST = ("invalid_request", "invalid_argument", "parse_error", "invalid_graph",
               "unknown_node", "unbounded_cycle", "invalid_input", "invalid_otlp")
UNPROCESSABLE = ("fork_point_not_found", "fork_point_mid_node", "invalid_change",
                 "invalid_overrides", "conflicting_changes", "unpriced_model",
                 "live_budget_exceeded", "write_not_allowed", "prefix_diverged", "version_skew",
                 "source_missing", "replay_divergence", "unknown_provider", "unknown_tool",
                 "unknown_workflow",
                 "idempotency_conflict", "store_rejected", "imported_run",
                 "workflow_map_invalid", "workflow_input_missing", "one_call_only",
                 "call_not_replayable")
CONFLICT = ("run_in_progress", "promote_conflict", "invalid_run_state", "case_exists",
            "seq_conflict", "event_gap", "already_answered", "lease_lost", "trace_arriving")

STATUS: dict[str, int] = {
    **dict.fromkeys(BAD_REQUEST, 400),
    **dict.fromkeys(UNPROCESSABLE, 422),
    **dict.fromkeys(CONFLICT, 409),
    "not_authenticated": 401, "authentication_failed": 401,
    "permission_denied": 403,
    "not_found": 404, "unknown_scenario": 404,
    "method_not_allowed": 405, "not_acceptable": 406, "unsupported_media_type": 415,
    "throttled": 429,
    # a model provider failed or said what forklab cannot record as an answer: upstream
    "provider_error": 502, "unexpected_tool_calls": 502, "provider_timeout": 504,
    "database_not_ready": 503,
    # a malformed engine setting (FORKLAB_MAX_CONCURRENCY): the server's fault, not the
    # caller's; settings refuse it at start-up, so a request can only meet it mid-reconfigure
    "invalid_configuration": 503,
}
DEFAULT_STATUS = 400  # a ForklabError whose code is not listed is still the caller's error


def status_for(code: str) -> int:
    """The HTTP status of an error ``code`` (``DEFAULT_STATUS`` for one not listed)."""
    return STATUS.get(code, DEFAULT_STATUS)
