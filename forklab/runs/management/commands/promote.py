from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from forklab.engine.fork.lifecycle import promote
from forklab.runs import cli
from forklab.runs.management.base import ForklabCommand


class Command(ForklabCommand):
    help = "Adopt a fork's config changes (model, prompt, temperature, config) as a new graph version."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("fork", help="the fork's run id")
        parser.add_argument(
            "--only-applied", action="store_true",
            help="promote only the changes the fork's tail applied (leave out, and list, a "
                 "change to a node that ran before the fork point or never ran after it)")

    def handle(self, *args: Any, **options: Any) -> None:
        run, store = cli.store_for(options["fork"])
        result = promote(run.id, store=store, only_applied=options["only_applied"])
        lines = [f"graph {result.graph_id} version {result.version} (from version "
                 f"{result.from_version}) with {len(result.promoted)} change(s)"]
        lines += [f"  not promoted: {s['reason']}" for s in result.skipped]
        self.out(options, result.wire(), "\n".join(lines))
