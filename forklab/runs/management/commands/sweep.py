from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import CommandParser

from forklab.engine.fork.diff import usd_text
from forklab.engine.fork.sweep import estimate_sweep, fork_each
from forklab.engine.fork.wire import SweepSpec, build
from forklab.runs import cli, leases
from forklab.runs.engine_env import build_environment
from forklab.runs.errors import InvalidArgument
from forklab.runs.forking import fork_base
from forklab.runs.imported_forks import require_settled
from forklab.runs.management.base import ForklabCommand
from forklab.runs.management.commands.fork import add_policy_flags, policy_and_budget

VARIANT_FORM = "NAME=CHANGES_JSON (a change or a JSON list of changes)"
VARIANT_EXAMPLE = 'terse=\'{"kind": "prompt", "target": "write", "system_prompt": "Be terse."}\''


class Command(ForklabCommand):
    help = "Fork one run at one point once per named variant (a sweep)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="base run id")
        parser.add_argument("--at", required=True, help="fork point (see fork --help)")
        parser.add_argument("--variant", action="append", required=True,
                            metavar="NAME=CHANGES_JSON",
                            help="one variant: its name, '=', then one change or a JSON list "
                                 "of changes (the objects of fork --changes); repeat the flag "
                                 "once per variant, each with its own name")
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument("--estimate", action="store_true", help="predict spend only")
        add_policy_flags(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        with leases.held(leases.new_owner("cli")) as owner:
            self._sweep(options, *cli.store_for(options["run"], lease=owner))

    def _sweep(self, options: dict[str, Any], run: Any, store: Any) -> None:
        require_settled(run)
        run = fork_base(run)  # an imported run mapped to a workflow: its workflow base
        variants = {}
        for text in options["variant"]:
            name, value = cli.split_pair(text, "variant", VARIANT_FORM, VARIANT_EXAMPLE)
            if name in variants:
                raise InvalidArgument(f"--variant {name!r} is given twice; give each variant "
                                      "its own name (a list of changes is one variant)")
            variants[name] = cli.variant_changes(name, cli.load_json(value, f"--variant {name}"))
        policy, budget = policy_and_budget(options)
        spec = build(SweepSpec, base_run=run.id, at=cli.point(options["at"]), variants=variants,
                     policy=policy, budget=budget, concurrency=options["concurrency"],
                     ignore_budget=options["ignore_budget"])
        env = build_environment()
        if options["estimate"]:
            est = estimate_sweep(run.id, at=spec.at, variants=spec.variants,
                                 policy=spec.policy, budget=spec.budget, store=store, env=env)
            self.out(options, est, "\n".join([*est["lines"], f"total ${est['cost_usd']:.4f}"]))
            return
        sweep = fork_each(run.id, at=spec.at, variants=spec.variants,
                          concurrency=spec.concurrency, policy=spec.policy, budget=spec.budget,
                          ignore_budget=spec.ignore_budget, store=store, env=env)
        lines = [f"sweep {sweep.fork_group_id} of {run.id}"]
        for name, result in sweep.results.items():
            state = result.state
            lines.append(f"  {name:<16} {state.status if state else '?':<10} "
                         f"{result.run_id}  {usd_text(result.incurred_cost_usd)}")
        for name, error in sweep.errors.items():
            lines.append(f"  {name:<16} error      {error['code']}: {error['detail']}")
        lines.append(f"  total incurred {usd_text(sweep.incurred_cost_usd)}")
        failures = sweep.failures()
        if failures:
            lines.append(f"{len(failures)} of {len(variants)} variant(s) failed: "
                         + "; ".join(f"{name}: {why}" for name, why in failures.items()))
        self.out(options, json.loads(json.dumps(sweep.wire(), default=str)), "\n".join(lines))
        if failures:
            sys.exit(1)  # a script must not take a sweep with a failed variant for a success
