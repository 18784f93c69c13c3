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
