from __future__ import annotations

from typing import Any

from forklab.runs.management.base import ForklabCommand
from forklab.runs.models import Run
from forklab.runs.serializers_json import run_to_json
from forklab.runs.services import install_demo


class Command(ForklabCommand):
    help = ("Install the demo scenarios in project 'demo', create the demo login (demo/demo) "
            "and record one run of each scenario. Idempotent.")

    def handle(self, *args: Any, **options: Any) -> None:
        result = install_demo()
        ids = {**result.existing, **result.recorded}
        runs = {r.id: r for r in Run.objects.select_related("project").filter(pk__in=ids.values())}
        data = {
            "project": result.project.slug,
            "user": "demo",
            "recorded": sorted(result.recorded),
            "existing": sorted(result.existing),
            "runs": {name: run_to_json(runs[run_id]) for name, run_id in ids.items()},
        }
        lines = [f"project {result.project.slug!r}; login demo / demo"]
        for name, run_id in ids.items():
            run = runs[run_id]
            verb = "recorded" if name in result.recorded else "exists  "
            lines.append(f"  {verb} {name:<18} {run.id}  {run.status}")
        self.out(options, data, "\n".join(lines))
