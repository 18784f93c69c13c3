from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandParser

from forklab.engine.fork.fidelity import FidelityResult, MetamorphicResult, deep_check, fork_check
from forklab.engine.scenarios import get_scenario
from forklab.runs import cli
from forklab.runs.engine_env import build_environment
from forklab.runs.errors import InvalidArgument
from forklab.runs.forking import fork_base
from forklab.runs.imported_forks import require_replayable
from forklab.runs.management.base import ForklabCommand
from forklab.runs.models import Run, RunKind


class Command(ForklabCommand):
    help = ("Null-fork every point of every recorded run (or one scenario / run) and fail on "
            "the first that does not reproduce the base exactly with zero calls. --deep adds "
            "the metamorphic checks (point independence, memoize on = off, fork of a fork = "
            "combined fork) with changes derived from each run; any failure exits 1.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--scenario", help="only runs of this demo scenario")
        parser.add_argument("run_id", nargs="?", metavar="RUN",
                            help="only this run (as --run; the form the other verbs take)")
        parser.add_argument("--run", help="only this run")
        parser.add_argument("--deep", action="store_true",
                            help="also run the metamorphic checks 1, 2 and 4 on every run")

    def handle(self, *args: Any, **options: Any) -> None:
        # imported runs are forked one call at a time, never re-executed whole: their graph
        # only describes their trace (require_replayable says so for a named one)
        runs = Run.objects.filter(run_kind=RunKind.PRIMARY, last_seq__gt=0, trace_id="",
                                  status__in=["completed", "failed", "blocked", "cancelled"])
        if options["scenario"]:
            runs = runs.filter(graph_slug=get_scenario(options["scenario"]).graph().id)
        if options["run_id"] and options["run"] and options["run_id"] != options["run"]:
            raise InvalidArgument(f"two runs given ({options['run_id']!r} and --run "
                                  f"{options['run']!r}); give one")
        run_id = options["run_id"] or options["run"]
        if run_id:
            named = cli.store_for(run_id)[0]
            require_replayable(named, check=True)
            named = fork_base(named)  # a mapped imported run: its workflow base
            runs = Run.objects.filter(pk=named.id)
        env = build_environment()
        results, failed = self._null_forks(list(runs.order_by("created_at")), env)
        deep = self._deep(list(runs.order_by("created_at")), env) if options["deep"] else None
        broken = [r for r in deep or [] if not r.ok]
        lines = [f"{'ok ' if r.ok else 'FAIL'} {r.run_id[:12]} seq {r.point.seq:>5} "
                 f"{r.point.label}" for r in results]
        if failed is not None:
            lines.append(failed.detail)
        lines += [f"{r.id[:12]} is a fork: checked at its own points; the points it inherited "
                  f"are its base's (check them with --run {r.parent_run_id})"
                  for r in runs if r.parent_run_id]
        lines.append(f"{len(results)} null forks checked, "
                     f"{'1 mismatch' if failed else 'all reproduce'}")
        if deep is not None:
            lines += _deep_lines(deep)
        data = {"ok": failed is None and not broken, "results": [r.wire() for r in results],
                **({} if deep is None else {"deep": [r.wire() for r in deep]})}
        self.out(options, data, "\n".join(lines))
        if failed is not None or broken:
            sys.exit(1)

    def _null_forks(self, runs: list[Run], env: Any) -> tuple[list[FidelityResult],
                                                               FidelityResult | None]:
        results: list[FidelityResult] = []
        for run in runs:
            _, store = cli.store_for(run.id)
            for result in fork_check(run.id, store=store, env=env):
                results.append(result)
                if not result.ok:
                    return results, result
        return results, None

    def _deep(self, runs: list[Run], env: Any) -> list[MetamorphicResult]:
        found: list[MetamorphicResult] = []
        for run in runs:
            _, store = cli.store_for(run.id)
            found += deep_check(run.id, store=store, env=env)
        return found


def _deep_lines(deep: list[MetamorphicResult]) -> list[str]:
    lines = []
    for r in deep:
        mark = "skip" if r.skipped else ("ok  " if r.ok else "FAIL")
        said = r.skipped or (", ".join(r.compared) if r.ok else r.compared[-1])
        lines.append(f"{mark} {r.run_id[:12]} {r.title} — {said}")
        if not r.ok:
            lines.append(r.detail)
    held = sum(1 for r in deep if r.ok and not r.skipped)
    broken = sum(1 for r in deep if not r.ok)
    skipped = sum(1 for r in deep if r.skipped)
    verdict = f"{broken} failed" if broken else "all hold"
    lines.append(f"{held + broken} metamorphic checks, {verdict}"
                 + (f" ({skipped} skipped)" if skipped else ""))
    return lines
