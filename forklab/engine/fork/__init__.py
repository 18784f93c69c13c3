"""Counterfactual forking: fork points, changes, the guarded tail, diff, sweeps, fidelity."""

from forklab.engine.fork.base import fork_points
from forklab.engine.fork.changes import Change, change, parse_change, parse_changes
from forklab.engine.fork.core import BaseRun, ForkPlan, load_base, prepare_fork
from forklab.engine.fork.diff import RunDiff, diff_runs, format_run_diff
from forklab.engine.fork.estimate import Estimate
from forklab.engine.fork.points import ForkPoint
from forklab.engine.fork.resolve import parse_point
from forklab.engine.fork.result import ForkResult, fork
from forklab.engine.fork.tail import Budget, Policy, SharedMemo

__all__ = [
    "BaseRun", "Budget", "Change", "Estimate", "ForkPlan", "ForkPoint", "ForkResult", "Policy",
    "RunDiff", "SharedMemo", "change", "diff_runs", "fork", "fork_points", "format_run_diff",
    "load_base", "parse_change", "parse_changes", "parse_point", "prepare_fork",
]
