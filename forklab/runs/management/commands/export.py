from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from forklab.engine.traces.export import export_run
from forklab.runs import queries
from forklab.runs.management.base import ForklabCommand
from forklab.runs.store import DjangoStore


class Command(ForklabCommand):
    help = ("Print a run as an OTLP JSON trace in the GenAI conventions (SPEC §8); "
            "forklab import reads it back.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="run id")
        parser.add_argument("--output", "-o", help="write to this file instead of stdout")

    def handle(self, *args: Any, **options: Any) -> None:
        run = queries.get_run(options["run"])
        store = DjangoStore(run.project)
        document = export_run(store.read(run.id), recording=store.read)
        text = json.dumps(document, ensure_ascii=False)
        if options.get("output"):
            with open(options["output"], "w", encoding="utf-8") as out:
                out.write(text)
            self.out(options, {"run": run.id, "output": options["output"]}, options["output"])
        else:
            self.stdout.write(text)
