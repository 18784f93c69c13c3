from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from forklab.runs.cli import store_for
from forklab.runs.forking import fork_points_of
from forklab.runs.management.base import ForklabCommand


class Command(ForklabCommand):
    help = "List the addressable fork points of a run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="run id")

    def handle(self, *args: Any, **options: Any) -> None:
        run, _ = store_for(options["run"])
        points = fork_points_of(run)
        own = {run.id, *(p["run_id"] for p in points[:1] if run.trace_id)}  # a mapped base's
        lines = [f"seq {p['seq']:>6}  {p['label']}"
                 + (f"  (inherited: seq:{p['seq']}@{p['run_id']})" if p["run_id"] not in own
                    else "") for p in points] or ["no fork points"]
        self.out(options, points, "\n".join(lines))
