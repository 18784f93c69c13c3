"""``manage.py db_worker``: django-tasks-db's queue worker, plus forklab's recovery.

The worker runs one task at a time on its main thread. This command adds what every forklab
executor needs around it (``forklab.runs.leases``, ``forklab.runs.recovery``): the lease
heartbeat (a thread renewing the leases of the run the worker executes) and the recovery
supervisor — a sweep at start-up, then every ``FORKLAB_RECOVERY_SWEEP_S`` — so a worker that
comes up after another died, or a surviving one, takes over what the dead one held.
With ``FORKLAB_WORKER_NICE`` set it first lowers its own CPU priority (``os.nice``), so on a
host it shares with web processes, accepting requests wins the CPU over running tails.
Everything else (options, signals, shutdown) is django-tasks-db's.
"""

from __future__ import annotations

import os
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from forklab.runs.recovery import supervisor

if apps.is_installed("django_tasks_db"):
    from django_tasks_db.management.commands.db_worker import Command as QueueWorker
else:  # embedded mode: tasks run on the web process's thread pool, there is no queue
    QueueWorker = BaseCommand  # type: ignore[misc,assignment]


class Command(QueueWorker):
    help = "Run a database queue worker (django-tasks-db) with forklab's lease recovery."

    def handle(self, *args: Any, **options: Any) -> None:
        if QueueWorker is BaseCommand:
            raise CommandError("db_worker works the database queue of scale-out mode: set "
                               "FORKLAB_TASKS_BACKEND=db (docs/deployment.md); in embedded "
                               "mode the web process runs tasks itself")
        if settings.FORKLAB_WORKER_NICE:
            os.nice(settings.FORKLAB_WORKER_NICE)  # an increment: the process's own priority
        supervisor.start()
        super().handle(*args, **options)
