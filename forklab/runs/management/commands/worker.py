"""``forklab worker``: a queue worker of the configured task backend.

Scale-out mode (``FORKLAB_TASKS_BACKEND=db``) runs ``db_worker`` — every argument passes
through to it. The embedded mode has no queue (the web process runs its tasks on a thread
pool): there the verb says so and exits 1, rather than wait on a queue nobody fills.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.management import load_command_class
from django.core.management.base import BaseCommand

from forklab.runs.management.base import fail


class Command(BaseCommand):
    help = ("Run a queue worker for scale-out mode (FORKLAB_TASKS_BACKEND=db): "
            "db_worker, with forklab's lease recovery; its flags pass through.")

    def run_from_argv(self, argv: list[str]) -> None:
        if not apps.is_installed("django_tasks_db"):
            fail("invalid_argument",
                 "no task queue to work: embedded mode runs tasks inside `forklab serve`; "
                 "a worker needs scale-out mode (FORKLAB_TASKS_BACKEND=db, the `scale` extra; "
                 "docs/deployment.md)")
        load_command_class("forklab.runs", "db_worker").run_from_argv([argv[0], "db_worker",
                                                                       *argv[2:]])

    def handle(self, *args: Any, **options: Any) -> None:  # call_command("worker")
        self.run_from_argv(["forklab", "worker", *args])
