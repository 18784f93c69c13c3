from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from forklab.runs.management.base import ForklabCommand
from forklab.runs.models import Run, RunKind, RunStatus
from forklab.runs.queries import list_runs
from forklab.runs.serializers_json import runs_to_json, usd


class Command(ForklabCommand):
    help = "List runs, newest first."

    def add_arguments(self, parser: CommandParser) -> None:
        # Filter values are checked by the query (one error format for CLI and API).
        parser.add_argument("--kind", help=f"one of {', '.join(RunKind.values())}")
        parser.add_argument("--status", help=f"one of {', '.join(RunStatus.values())}")
        parser.add_argument("--graph", help="graph id")
        parser.add_argument("--project", help="project slug")
        parser.add_argument("--trace-id", help="an imported run's OpenTelemetry trace id")
        parser.add_argument("--conversation", help="imported runs of one conversation")
        parser.add_argument("--limit", type=int, default=None, help="at most N runs")

    def handle(self, *args: Any, **options: Any) -> None:
        runs = list_runs(kind=options["kind"], status=options["status"],
                         graph=options["graph"], project=options["project"],
                         trace_id=options["trace_id"], conversation=options["conversation"])
        if options["limit"] is not None:
            runs = runs[: max(0, options["limit"])]
        rows = list(runs)
        self.out(options, runs_to_json(rows), table(rows))


def table(runs: list[Run]) -> str:
    if not runs:
        return "no runs"
    header = ("ID", "GRAPH", "KIND", "STATUS", "COST USD", "TOKENS", "LABEL")
    rows = [
        (r.id, f"{r.graph_slug}@{r.graph_version_number}", r.run_kind, r.status,
         f"{usd(r.cost_usd):.6f}", str(r.input_tokens + r.output_tokens), r.label)
        for r in runs
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    )
