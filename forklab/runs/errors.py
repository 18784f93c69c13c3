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
    """A fork of a run imported from a trace (SPEC §8): not offered yet — the generic fork
    would re-execute the trace's synthetic graph, which is descriptive only."""

    code = "imported_run"
