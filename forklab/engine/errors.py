"""The one error hierarchy of forklab.

Every error a user can cause is a :class:`ForklabError` with a stable ``code`` (what API
clients, the CLI and tests match on) and a message that says what was expected, what was
found and what to do. ``context`` carries machine-readable details (the API copies it into
the error body next to ``code`` and ``detail``).
"""

from __future__ import annotations

from typing import Any, ClassVar


def indefinite(word: str) -> str:
    """``word`` after its indefinite article, for messages naming a kind or a type: ``a tool``,
    ``an agent``, ``an int``."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


class ForklabError(Exception):
    """Base of every error forklab raises on purpose."""

    code: ClassVar[str] = "forklab_error"

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def to_dict(self) -> dict[str, Any]:
        """Wire form: ``{"code", "detail", **context}``."""
        return {"code": self.code, "detail": self.message, **self.context}


class GraphValidationError(ForklabError):
    """A graph definition is malformed: names the node and field at fault."""

    code = "invalid_graph"


class UnknownNodeReference(GraphValidationError):
    code = "unknown_node"


class UnboundedCycleError(GraphValidationError):
    code = "unbounded_cycle"


class EventGapError(ForklabError):
    """An event's seq is not last+1, or its run id is not the log's run id."""

    code = "event_gap"


class SeqConflictError(EventGapError):
    """``append`` was called with an ``expected_seq`` that is not the stored last seq."""

    code = "seq_conflict"


class RunNotFound(ForklabError):
    code = "not_found"


class GraphNotFound(ForklabError):
    code = "not_found"


class ProviderError(ForklabError):
    """A model provider failed: a refused connection, an HTTP error status (after the
    retries it allows), or a malformed answer. ``context`` carries ``url``, ``status`` (None
    when no HTTP answer came), ``provider_message`` (the vendor's own error text, when it
    gave one) and ``attempts`` (every HTTP attempt, as ``Attempt.to_wire`` dicts)."""

    code = "provider_error"


class ProviderTimeout(ForklabError):
    """A model provider did not answer within its time limit, on every attempt. The message
    names the URL and the limit in seconds; ``context`` carries ``url``, ``timeout_s`` and
    ``attempts``."""

    code = "provider_timeout"


class UnexpectedToolCalls(ForklabError):
    """A model asked for tool calls although its agent was offered no tools: failing the
    call keeps the request visible instead of recording an empty answer."""

    code = "unexpected_tool_calls"


class UnknownProviderError(ForklabError):
    code = "unknown_provider"


class ToolResolutionError(ForklabError):
    code = "unknown_tool"


class WorkflowResolutionError(ForklabError):
    """A ``module:function`` workflow this deployment cannot run: outside the allowed
    modules (``FORKLAB_WORKFLOW_MODULES``), not importable, or not a function."""

    code = "unknown_workflow"


class WorkflowMapInvalid(ForklabError):
    """``FORKLAB_WORKFLOW_MAP`` maps a trace's name to a workflow this deployment cannot run
    (not ``module:function`` under FORKLAB_WORKFLOW_MODULES, nor a workflow recorded in the
    run's project): a configuration error, named with the setting to fix."""

    code = "workflow_map_invalid"


class WorkflowInputMissing(ForklabError):
    """An imported run mapped to a workflow whose trace did not capture the workflow's
    arguments (and the fork request supplied none): says where to capture or give them."""

    code = "workflow_input_missing"


class CallNotReplayable(ForklabError):
    """A call imported without its content (inspect-only) cannot be re-asked or answer a
    fork's prefix. Names the call, what is missing and how to capture it."""

    code = "call_not_replayable"


class OneCallOnly(ForklabError):
    """A fork of an imported run not mapped to code that is not a one-call fork (a node
    point, another change kind, a change of another call, a fork of a one-call fork)."""

    code = "one_call_only"


class RunStateError(ForklabError):
    """An operation does not fit the run's status (e.g. answering a run that is not paused)."""

    code = "invalid_run_state"


class VersionSkewError(ForklabError):
    code = "version_skew"


# -- forking (SPEC §3, §4.3 error codes) ------------------------------------------------------


class ForkPointNotFound(ForklabError):
    code = "fork_point_not_found"


class PointCompacted(ForkPointNotFound):
    """The address resolved to a boundary whose events were compacted away. ``point`` is
    that boundary (a ``ForkPoint``), so ``source="auto"`` can look for a snapshot of it."""

    def __init__(self, message: str, *, point: Any, **context: Any) -> None:
        super().__init__(message, **context)
        self.point = point


class ForkPointMidNode(ForklabError):
    code = "fork_point_mid_node"


class ConflictingChanges(ForklabError):
    code = "conflicting_changes"


class InvalidChange(ForklabError):
    code = "invalid_change"


class InvalidOverrides(ForklabError):
    """Size, nesting, key-count or redaction-placeholder limits of a change spec."""

    code = "invalid_overrides"


class UnpricedModel(ForklabError):
    code = "unpriced_model"


class LiveBudgetExceeded(ForklabError):
    code = "live_budget_exceeded"


class WriteNotAllowed(ForklabError):
    code = "write_not_allowed"


class PrefixDiverged(ForklabError):
    code = "prefix_diverged"


class SourceMissing(ForklabError):
    code = "source_missing"


class RunInProgress(ForklabError):
    code = "run_in_progress"


class PromoteConflict(ForklabError):
    code = "promote_conflict"


class PromoteNotApplied(PromoteConflict):
    """A fork's config change its tail never applied as it would be promoted (its node ran
    before the point the change was applied at, or never after it): the promoted graph
    would not reproduce the fork. Same code (409); ``reason`` is ``not_applied``."""


class ReplayDivergence(ForklabError):
    code = "replay_divergence"


# -- edges (SPEC §4.3) ---------------------------------------------------------------------


class InvalidInput(ForklabError):
    """A value cannot be stored: an unencodable string, NUL, a non-finite number, or nesting
    or size over the stated limits (``forklab.engine.inputs``). Names the JSON path."""

    code = "invalid_input"


class StoreRejected(ForklabError):
    """The database refused an append for a reason other than a concurrent writer (a
    constraint or a value it cannot hold). Nothing was appended."""

    code = "store_rejected"


class ConfigurationError(ForklabError):
    """An environment setting of the engine is malformed; names the variable."""

    code = "invalid_configuration"
