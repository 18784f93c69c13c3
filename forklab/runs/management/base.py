"""The base of every forklab management command.

Every command gets ``--json``. A user error — any ``ForklabError``, a bad argument (the
argument parser's own errors included: an unknown flag, a bad choice, a non-integer, a
missing argument), a database that was never migrated — prints one line
``error: <code>: <message>`` on stderr and exits 1; no traceback, no usage dump. Called
through ``call_command`` (tests), the error propagates.

Every string argument passes the edge checks (``forklab.engine.inputs``): a NUL character
or bytes that are not UTF-8 in an argument is ``invalid_input`` naming the flag.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, NoReturn

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
    handle_default_options,
)
from django.db import OperationalError, ProgrammingError, connections

from forklab.engine.errors import ForklabError
from forklab.engine.inputs import check_json_value
from forklab.runs.errors import DatabaseNotReady, InvalidArgument


class ForklabCommand(BaseCommand):
    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
        return parser

    def run_from_argv(self, argv: list[str]) -> None:
        """Django's, except that the parser's errors are one line, not a usage dump."""
        parser = self.create_parser(argv[0], argv[1])  # not "from the command line": its
        try:  # errors raise CommandError instead of printing the usage and exiting 2
            options = parser.parse_args(argv[2:])
        except CommandError as exc:
            fail("invalid_argument", f"{str(exc).removeprefix('Error: ')} (see --help)")
        self._called_from_command_line = True
        cmd_options = vars(options)
        args = cmd_options.pop("args", ())
        handle_default_options(options)
        try:
            self.execute(*args, **cmd_options)
        finally:
            with contextlib.suppress(ImproperlyConfigured):
                connections.close_all()

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            try:
                _check_arguments(args, options)
                return super().execute(*args, **options)
            except (OperationalError, ProgrammingError) as exc:
                if not _missing_table(exc):
                    raise
                raise DatabaseNotReady(
                    f"{exc}; the database is not migrated: run forklab migrate (or forklab serve)"
                ) from exc
            except CommandError as exc:
                raise InvalidArgument(str(exc)) from exc
        except ForklabError as exc:
            if not getattr(self, "_called_from_command_line", False):
                raise
            fail(exc.code, exc.message)

    def out(self, options: dict[str, Any], data: Any, text: str) -> None:
        """Print ``data`` as JSON under ``--json``, else ``text``."""
        if options.get("json"):
            self.stdout.write(json.dumps(data, indent=2, default=str, ensure_ascii=False))
        else:
            self.stdout.write(text)


def fail(code: str, message: str) -> NoReturn:
    """The CLI's one error line on stderr, then exit 1."""
    text = " ".join(message.split())  # one line, always
    sys.stderr.write(f"error: {code}: {text}\n".encode("utf-8", "backslashreplace")
                     .decode("utf-8"))
    sys.exit(1)


def _check_arguments(args: tuple[Any, ...], options: dict[str, Any]) -> None:
    for i, value in enumerate(args):
        check_json_value(value, where=f"argument {i + 1}")
    for name, value in options.items():
        if isinstance(value, (str, list, tuple)):
            check_json_value(value, where=f"--{name.replace('_', '-')}")


def _missing_table(exc: Exception) -> bool:
    text = str(exc)
    return "no such table" in text or ("relation" in text and "does not exist" in text)
