"""``forklab serve``: everything between an installed forklab and a dashboard in a browser.

Migrates the database, collects the static files (content-hashed, compressed, into
``STATIC_ROOT``), with ``--demo`` installs the demo runs (idempotent), prints the URL, the
login and the health URL, then replaces itself with daphne serving ``forklab.asgi`` — the
process a supervisor (or Ctrl-C) stops is the server itself.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandParser
from django.db import connections

from forklab.runs.demo_login import DEMO_PASSWORD, DEMO_USERNAME, demo_login_open
from forklab.runs.management.base import ForklabCommand

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
# ALLOWED_HOSTS naming only this machine (the default): other clients' requests are refused
LOCAL_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]", "testserver"})


def start_daphne(host: str, port: int) -> None:
    """Become daphne serving forklab on ``host:port`` (never returns)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "daphne", "-b", host, "-p", str(port),
                              "forklab.asgi:application"])


class Command(ForklabCommand):
    help = ("Migrate the database, collect static files and serve the dashboard, API and "
            "websockets on daphne; --demo also records the demo runs (login demo / demo).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1",
                            help="address to listen on (default: %(default)s)")
        parser.add_argument("--port", type=int, default=8000,
                            help="port to listen on (default: %(default)s)")
        parser.add_argument("--demo", action="store_true",
                            help="install the demo scenarios and record one run of each")

    def handle(self, *args: Any, **options: Any) -> None:
        host, port = options["host"], options["port"]
        self.stderr.write(f"forklab data: {settings.FORKLAB_HOME}")
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        if options["demo"]:
            call_command("demo", stdout=self.stderr)
        url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
        login = self.login()
        self.out(options, {"url": url, "health": f"{url}healthz", "login": login}, "\n".join([
            "",
            f"  forklab is serving at {url}  (health: {url}healthz)",
            f"  {login}; Ctrl-C stops it",
            "",
        ]))
        if host not in LOOPBACK and set(settings.ALLOWED_HOSTS) <= LOCAL_NAMES:
            self.stderr.write("  note: clients that reach this host by its name or address get "
                              "400 until FORKLAB_ALLOWED_HOSTS lists it (e.g. "
                              "FORKLAB_ALLOWED_HOSTS=forklab.example.com)")
        connections.close_all()  # daphne opens its own
        start_daphne(host, port)

    def login(self) -> str:
        if demo_login_open():
            return f"log in as {DEMO_USERNAME} / {DEMO_PASSWORD}"
        if not get_user_model().objects.exists():
            return "no login yet: create one with `forklab createsuperuser`"
        return "log in with your forklab account"
