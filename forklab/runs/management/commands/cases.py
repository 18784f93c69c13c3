from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandParser

from forklab.engine.fork.lifecycle import NO_CRITERIA
from forklab.runs import cli
from forklab.runs.forking import run_case_rows, save_run_as_case
from forklab.runs.management.base import ForklabCommand
from forklab.runs.models import Case
from forklab.runs.specs import CaseSpec, parse


class Command(ForklabCommand):
    help = "Save a finished fork as a regression case, or run every saved case."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="verb", required=True)
        save = sub.add_parser("save", help="save a fork as a case")
        save.add_argument("fork")
        save.add_argument("--name", required=True)
        save.add_argument("--criteria", help='JSON list, e.g. [{"key": "status", "op": "eq", '
                                             '"value": "ok"}]')
        run = sub.add_parser("run", help="replay every case against its graph's current "
                                         "version; exit 1 if one fails")
        run.add_argument("--project", help="only this project's cases")
        run.add_argument("--graph-version", type=int, default=None, metavar="N",
                         help="run every case against version N of its graph (default: the "
                              "graph's current version)")
        for p in (save, run):
            p.add_argument("--json", action="store_true", help="print machine-readable JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["verb"] == "save":
            self._save(options)
        else:
            self._run(options)

    def _save(self, options: dict[str, Any]) -> None:
        run, _ = cli.store_for(options["fork"])
        criteria = cli.load_json(options["criteria"], "--criteria") if options["criteria"] else []
        spec = parse(CaseSpec, {"name": options["name"], "criteria": criteria})
        case = save_run_as_case(run=run, spec=spec)
        self.out(options, {"name": case.name, "fork_run_id": run.id, "criteria": case.criteria},
                 f"saved case {case.name!r} from fork {run.id}"
                 + ("" if criteria else f" ({NO_CRITERIA})"))

    def _run(self, options: dict[str, Any]) -> None:
        rows = Case.objects.all()
        if options["project"]:
            rows = rows.filter(project__slug=options["project"])
        results = [{"project": project, **result.wire()} for project, result
                   in run_case_rows(rows, graph_version=options["graph_version"])]
        lines = [f"{'pass' if r['passed'] else 'FAIL'}  {r['project']}/{r['name']}"
                 f"  (graph {r['graph_id']} version {r['graph_version']})"
                 + "".join(f"\n        {f}" for f in r["failures"])
                 + (f"\n        {r['note']}" if r["note"] else "") for r in results]
        failed = sum(1 for r in results if not r["passed"])
        lines.append(f"{len(results) - failed} passed, {failed} failed")
        self.out(options, {"results": results, "failed": failed}, "\n".join(lines))
        if failed:
            sys.exit(1)
