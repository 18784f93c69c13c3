from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from forklab.engine.fork import fork
from forklab.engine.fork.changes import AGENT_CHANGES
from forklab.engine.fork.wire import Budget, ForkSpec, Policy, build
from forklab.runs import cli, leases
from forklab.runs.engine_env import build_environment
from forklab.runs.forking import fork_base
from forklab.runs.imported_forks import require_settled
from forklab.runs.management.base import ForklabCommand
from forklab.runs.serializers_json import run_to_json


def add_change_flags(parser: CommandParser) -> None:
    add = parser.add_argument
    for kind, cls in AGENT_CHANGES.items():  # one flag per agent-setting kind of the engine
        add(cli.agent_flag(kind), action="append", dest=kind,
            metavar=f"T={cls.agent_field.upper()}",
            help=f"{(cls.__doc__ or kind).splitlines()[0].rstrip('.')} (T: node, role or call "
                 "key)")
    add("--set", action="append", metavar="KEY=JSON", help="set a memory key before the tail")
    add("--delete", action="append", metavar="KEY", help="delete a memory key before the tail")
    add("--config", action="append", metavar="NODE=JSON", help="patch a node's config")
    add("--route", action="append", metavar="FROM=TO", help="force a router's decision")
    add("--output", action="append", metavar="NODE[#N]=JSON",
        help="substitute a node's output (#N: that execution only)")
    add("--tool", action="append", metavar="NODE[#N]=JSON",
        help="substitute a tool node's result (#N: that execution only)")
    add("--reply", action="append", metavar="CALL=JSON",
        help="replace the model's reply at a call, e.g. assist#1/turn:2='\"Done.\"' or "
             "'{\"tool_calls\": [...]}'")
    add("--tool-result", action="append", dest="tool_result", metavar="CALL=JSON",
        help="replace one tool call's result, e.g. assist#1/turn:1/tool:1='{...}'")
    add("--rerun", action="append", metavar="CALL", help="run a call live instead of reusing it")
    add("--tools", action="append", metavar="AGENT=JSON",
        help='change the tools an agent (or one model call: a call key) is offered: '
             '{"add": [...], "remove": [...], "tool_choice": ...}')
    add("--messages", action="append", metavar="CALL=JSON",
        help="replace one model call's request messages: a JSON list of {role, content, "
             "tool_calls?, tool_call_id?}")
    # repeatable like every change flag, so a repeat is refused as conflicting, not lost
    add("--human", action="append", choices=("approved", "rejected", "edited"),
        help="answer approval gates")
    add("--input-patch", action="append", metavar="JSON",
        help="RFC 7396 merge patch over the run input")
    add("--changes", metavar="FILE", help="a JSON file with one change or a list")


def add_policy_flags(parser: CommandParser) -> None:
    parser.add_argument("--memoize", action="store_true", help="reuse unaffected nodes")
    parser.add_argument("--side-effects", metavar="replay|block|allow:A,B")
    parser.add_argument("--max-live-calls", type=int, default=50)
    parser.add_argument("--max-cost-usd", default="1.00", help="USD, or 'none' to clear")
    parser.add_argument("--ignore-budget", action="store_true")


def policy_and_budget(options: dict[str, Any]) -> tuple[Policy, Budget]:
    """The policy and budget flags as the engine's wire models (a bad value is the
    ``invalid_request`` the API answers for the same field)."""
    cost = options["max_cost_usd"]
    max_cost = None if str(cost).lower() == "none" else cli.finite(cost, "--max-cost-usd",
                                                                   "a number or 'none'")
    return (build(Policy, under=("policy",), side_effects=cli.side_effects(options["side_effects"]),
                  memoize=options["memoize"]),
            build(Budget, under=("budget",), max_live_calls=options["max_live_calls"],
                  max_cost_usd=max_cost))


class Command(ForklabCommand):
    help = ("Fork a recorded run at a point with changes; prints what the fork did (with "
            "--dry-run, what it would do).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run", help="base run id")
        parser.add_argument("--at", help="fork point: start, failure, seq:N, before:NODE#N, "
                                         "after:NODE#last, iteration:N, human, "
                                         "first-write:KEY, first-read:KEY, version:N")
        add_change_flags(parser)
        add_policy_flags(parser)
        parser.add_argument("--label", default="")
        parser.add_argument("--dry-run", action="store_true", help="resolve and estimate only")
        parser.add_argument("--source", choices=("events", "snapshot", "auto"), default="events")

    def handle(self, *args: Any, **options: Any) -> None:
        with leases.held(leases.new_owner("cli")) as owner:
            run, store = cli.store_for(options["run"], lease=owner)
            require_settled(run)
            changes = cli.changes_from_options(options)
            run = fork_base(run, changes=changes)  # an imported run mapped to a workflow
            policy, budget = policy_and_budget(options)
            spec = build(ForkSpec, base_run=run.id, at=cli.point(options["at"]),
                         changes=changes, policy=policy,
                         budget=budget, label=options["label"],
                         ignore_budget=options["ignore_budget"], source=options["source"])
            result = fork(run.id, at=spec.at, change=spec.changes, policy=spec.policy,
                          budget=spec.budget, label=spec.label, dry_run=options["dry_run"],
                          ignore_budget=spec.ignore_budget, source=spec.source,
                          store=store, env=build_environment())
        data = result.to_wire()
        if result.run_id:
            from forklab.runs.models import Run

            data = {**run_to_json(Run.objects.get(pk=result.run_id)), **data}
        self.out(options, data, result.explain())
