from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandParser

from forklab.engine.fork.fidelity import fork_check
from forklab.engine.scenarios import get_scenario
from forklab.runs import cli
from forklab.runs.engine_env import build_environment
from forklab.runs.management.base import ForklabCommand
from forklab.runs.models import Run, RunKind


class Command(ForklabCommand):
    help = ("Null-fork every point of every recorded run (or one scenario / run) and fail on "
            "the first that does not reproduce the base exactly with zero calls.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--scenario", help="only runs of this demo scenario")
        parser.add_argument("--run", help="only this run")

    def handle(self, *args: Any, **options: Any) -> None:
        runs = Run.objects.filter(run_kind=RunKind.PRIMARY,
                                  status__in=["completed", "failed", "blocked", "cancelled"])
        if options["scenario"]:
            runs = runs.filter(graph_slug=get_scenario(options["scenario"]).graph().id)
        if options["run"]:
            runs = Run.objects.filter(pk=cli.store_for(options["run"])[0].id)
        env, results, failed = build_environment(), [], None
        for run in runs.order_by("created_at"):
            _, store = cli.store_for(run.id)
            for result in fork_check(run.id, store=store, env=env):
                results.append(result.wire())
                if not result.ok:
                    failed = result
                    break
            if failed:
                break
        lines = [f"{'ok ' if r['ok'] else 'FAIL'} {r['run_id'][:12]} seq {r['point']['seq']:>5} "
                 f"{r['point']['label']}" for r in results]
        if failed is not None:
            lines.append(failed.detail)
        lines.append(f"{len(results)} null forks checked, {'1 mismatch' if failed else 'all reproduce'}")
        self.out(options, {"ok": failed is None, "results": results}, "\n".join(lines))
        if failed is not None:
            sys.exit(1)
