"""The ``forklab`` console command (``python -m forklab`` too).

``forklab VERB ARGS`` is ``manage.py VERB ARGS``: it hands the verb to Django's management
machinery, so every verb and flag — its parsing, its ``--json``, its one-line errors — is
the management command's own; there is no second copy of any verb.

``forklab --help`` lists the product's verbs: the management commands of forklab's apps,
found anew each time, so a verb added later is listed by adding its command. Django's own
commands (``migrate``, ``createsuperuser``, ``drf_create_token`` …) run too, unlisted. An
unknown verb is one line ``error: invalid_argument: …`` on stderr and exit status 1.
"""

from __future__ import annotations

import os
import sys
import textwrap

import forklab

# forklab's commands that are not verbs of their own: db_worker is what `forklab worker`
# runs in scale-out mode (kept under its django-tasks-db name for manage.py's users).
UNLISTED = frozenset({"db_worker"})


def main(argv: list[str] | None = None) -> None:
    """Run ``forklab ARGS`` (``argv`` defaults to ``sys.argv``; exits with the verb's status)."""
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forklab.settings")
    if not args or args in (["-h"], ["--help"], ["help"]):
        sys.stdout.write(usage())
        return
    if args == ["--version"]:
        sys.stdout.write(f"forklab {forklab.__version__}\n")
        return
    if args[0] == "help":  # `forklab help fork` is `forklab fork --help`
        args = [args[1], "--help", *args[2:]]
    import django
    from django.core.management import execute_from_command_line, get_commands

    django.setup()
    if args[0] not in get_commands():
        sys.stderr.write(f"error: invalid_argument: unknown command {args[0]!r}; "
                         "forklab --help lists the commands\n")
        sys.exit(1)
    execute_from_command_line(["forklab", *args])


def verbs() -> dict[str, str]:
    """Each product verb, in alphabetical order, with the summary of its help."""
    import django
    from django.core.management import get_commands, load_command_class

    django.setup()
    found = {}
    for name, app in sorted(get_commands().items()):
        if app.startswith("forklab.") and name not in UNLISTED:
            found[name] = first_sentence(load_command_class(app, name).help)
    return found


def first_sentence(text: str) -> str:
    """A command's help up to its first full stop or semicolon: the summary --help lists."""
    text = " ".join(text.split())
    ends = [i for i in (text.find(". "), text.find("; ")) if i >= 0]
    return text[: min(ends)] + "." if ends else text


def usage() -> str:
    from django.conf import settings

    lines = [
        "usage: forklab VERB [ARGS]   (forklab VERB --help: its arguments and flags)",
        "",
        forklab.__doc__ or "",
        "",
        "verbs:",
    ]
    for name, text in verbs().items():
        lines += textwrap.wrap(text, width=100, initial_indent=f"  {name:<11} ",
                               subsequent_indent=" " * 14)
    lines += [
        "",
        "Every verb takes --json (machine-readable output). Django's own commands run too,",
        "e.g. forklab migrate, forklab createsuperuser, forklab drf_create_token USER.",
        f"Data: {settings.FORKLAB_HOME} (FORKLAB_HOME). Version: forklab --version.",
        "",
    ]
    return "\n".join(lines)
