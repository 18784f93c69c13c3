"""Errors raised by the Django layer; same ``ForklabError`` base and ``code`` contract as the
engine, so the CLI and API map them uniformly."""

from __future__ import annotations

from forklab.engine.errors import ForklabError


class InvalidArgument(ForklabError):
    """A command or request argument is malformed (bad JSON, unknown filter value, …)."""

    code = "invalid_argument"


class NotFound(ForklabError):
    code = "not_found"


class DatabaseNotReady(ForklabError):
    code = "database_not_ready"


class LeaseLost(ForklabError):
    """The process appending to a run no longer holds its lease (another process took the
    run over after this one's heartbeat lapsed); it must stop without writing."""

    code = "lease_lost"


class AlreadyAnswered(ForklabError):
    """A second answer to the gate a paused run waits at (the first one wins)."""

    code = "already_answered"


class IdempotencyConflict(ForklabError):
    """A ``client_request_id`` reused with a different request body."""

    code = "idempotency_conflict"


class ImportedRunNotForkable(ForklabError):
    """A replay or fork-check of a run imported from a trace (SPEC §8): both re-execute the
    whole run, and a trace's synthetic graph only describes it (its replayable model calls
    can be forked one at a time instead)."""

    code = "imported_run"


class TraceArriving(ForklabError):
    """A fork of an imported run whose trace received spans moments ago: its log may still
    be rewritten by late spans; retry once the trace has settled."""

    code = "trace_arriving"
