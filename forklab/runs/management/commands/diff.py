from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from forklab.engine.fork.diff import diff_runs, format_run_diff
from forklab.engine.reducers import fold
from forklab.runs import cli
from forklab.runs.errors import NotFound
from forklab.runs.management.base import ForklabCommand


class Command(ForklabCommand):
    help = "Print the diff block of two runs (base, then variant)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("base")
        parser.add_argument("variant")

    def handle(self, *args: Any, **options: Any) -> None:
        states = []
        for run_id in (options["base"], options["variant"]):
            run, store = cli.store_for(run_id)
            events = store.read(run.id)
            if not events:
                raise NotFound(f"run {run.id!r} has no events to compare", run_id=run.id)
            states.append(fold(events))
        diff = diff_runs(states[0], states[1])
        header = f"diff {options['base']} → {options['variant']}"
        self.out(options, diff.wire(), format_run_diff(diff, header))
