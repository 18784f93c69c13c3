from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from forklab.engine.fork.replay import replay
from forklab.runs import cli
from forklab.runs.engine_env import build_environment
from forklab.runs.forking import require_replayable
from forklab.runs.management.base import ForklabCommand


class Command(ForklabCommand):
    help = ("Re-drive a recorded run through today's graph and engine with every call served "
            "from the recording; --strict fails with replay_divergence at the first difference.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run")
        parser.add_argument("--strict", action="store_true", help="fail on the first difference")

    def handle(self, *args: Any, **options: Any) -> None:
        run, store = cli.store_for(options["run"])
        require_replayable(run)
        state = replay(run.id, store=store, strict=options["strict"], env=build_environment())
        self.out(options, {"run_id": run.id, "status": state.status, "events": state.version,
                           "strict": options["strict"], "diverged": False},
                 f"replayed {run.id}: {state.version} events, {state.status}, no divergence")
