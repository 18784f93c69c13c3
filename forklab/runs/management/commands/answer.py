from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from forklab.runs import cli, control, tasks
from forklab.runs.management.base import ForklabCommand
from forklab.runs.models import Run
from forklab.runs.serializers_json import run_to_json
from forklab.runs.services import HUMAN_DECISIONS
from forklab.runs.specs import AnswerSpec, parse


class Command(ForklabCommand):
    help = ("Answer the approval gate a paused run waits at, then run it on here (as a worker "
            "would); prints the run's status.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="the paused run's id (a primary run or a fork)")
        parser.add_argument("--decision", required=True, choices=HUMAN_DECISIONS)
        parser.add_argument("--data", metavar="JSON", help="data recorded with the answer")
        parser.add_argument("--memory-updates", metavar="JSON",
                            help="a JSON object of memory keys to set: only keys the gate "
                                 "declares after its decision key in 'writes'")

    def handle(self, *args: Any, **options: Any) -> None:
        run, _ = cli.store_for(options["run"])
        body: dict[str, Any] = {"decision": options["decision"]}
        if options["data"] is not None:
            body["data"] = cli.load_json(options["data"], "--data")
        if options["memory_updates"] is not None:
            body["memory_updates"] = cli.load_json(options["memory_updates"],
                                                   "--memory-updates")
        # the same checks as the API's answer (state, first answer wins, declared keys),
        # nothing stored on a refusal; then the work a worker would do, in this process
        control.store_answer(run.id, parse(AnswerSpec, body),
                             answered_by="cli")
        tasks.claim_and_drive(run.id)
        run = Run.objects.get(pk=run.id)
        self.out(options, run_to_json(run), f"{run.id} {run.status}")
