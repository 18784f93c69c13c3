from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from forklab.engine.fork import fork_points
from forklab.runs.cli import store_for
from forklab.runs.management.base import ForklabCommand


class Command(ForklabCommand):
    help = "List the addressable fork points of a run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="run id")

    def handle(self, *args: Any, **options: Any) -> None:
        run, store = store_for(options["run"])
        points = [p.to_wire() for p in fork_points(store.read(run.id), store=store)]
        lines = [f"seq {p['seq']:>6}  {p['label']}"
                 + (f"  (inherited: seq:{p['seq']}@{p['run_id']})" if p["run_id"] != run.id
                    else "") for p in points] or ["no fork points"]
        self.out(options, points, "\n".join(lines))
