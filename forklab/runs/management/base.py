"""The base of every forklab management command.

Every command gets ``--json``. A user error (any ``ForklabError``, a bad argument, a database
that was never migrated) prints one line ``error: <code>: <message>`` on stderr and exits
non-zero; no traceback. Called through ``call_command`` (tests), the error propagates.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import OperationalError, ProgrammingError

from forklab.engine.errors import ForklabError
from forklab.runs.errors import DatabaseNotReady, InvalidArgument


class ForklabCommand(BaseCommand):
    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
        return parser

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            try:
                return super().execute(*args, **options)
            except (OperationalError, ProgrammingError) as exc:
                if not _missing_table(exc):
                    raise
                raise DatabaseNotReady(
                    f"{exc}; the database is not migrated: run manage.py migrate"
                ) from exc
            except CommandError as exc:
                raise InvalidArgument(str(exc)) from exc
        except ForklabError as exc:
            if not getattr(self, "_called_from_command_line", False):
                raise
            message = " ".join(exc.message.split())  # one line, always
            sys.stderr.write(f"error: {exc.code}: {message}\n")
            sys.exit(1)

    def out(self, options: dict[str, Any], data: Any, text: str) -> None:
        """Print ``data`` as JSON under ``--json``, else ``text``."""
        if options.get("json"):
            self.stdout.write(json.dumps(data, indent=2, default=str, ensure_ascii=False))
        else:
            self.stdout.write(text)


def _missing_table(exc: Exception) -> bool:
    text = str(exc)
    return "no such table" in text or ("relation" in text and "does not exist" in text)
