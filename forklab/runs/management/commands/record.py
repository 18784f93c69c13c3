from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from forklab.runs.errors import InvalidArgument
from forklab.runs.management.base import ForklabCommand
from forklab.runs.serializers_json import run_to_json
from forklab.runs.services import (
    HUMAN_DECISIONS,
    parse_input,
    project_for_recording,
    record_run,
    resolve_graph,
    resolve_workflow,
)
from forklab.runs.store import DEFAULT_PROJECT_SLUG


class Command(ForklabCommand):
    help = ("Record a run of a demo scenario, a graph file (.json/.yaml) or a code-first "
            "workflow (--workflow module:function); prints the run id.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", nargs="?",
                            help="scenario name or path/to/graph.json|yaml")
        parser.add_argument("--workflow", metavar="MODULE:FUNCTION",
                            help="a @forklab.workflow function to run instead of a graph "
                                 "(its module under FORKLAB_WORKFLOW_MODULES)")
        parser.add_argument("--input", help="run input as a JSON object "
                                            "(default: the scenario's input, or {})")
        parser.add_argument("--label", default="", help="a label shown with the run")
        parser.add_argument("--project", default=DEFAULT_PROJECT_SLUG,
                            help="project slug (default: %(default)s)")
        parser.add_argument("--answer", choices=HUMAN_DECISIONS,
                            help="answer approval gates with this decision instead of pausing")

    def handle(self, *args: Any, **options: Any) -> None:
        if (options["source"] is None) == (options["workflow"] is None):
            raise InvalidArgument("give a scenario or graph file, or --workflow "
                                  "MODULE:FUNCTION (one of them)")
        source = (resolve_workflow(options["workflow"]) if options["workflow"]
                  else resolve_graph(options["source"]))
        given = parse_input(options["input"])
        project = project_for_recording(options["project"])
        run = record_run(
            project=project, graph=source.graph,
            input=source.default_input if given is None else given,
            label=options["label"], human_decision=options["answer"],
        )
        self.out(options, run_to_json(run), run.id)
