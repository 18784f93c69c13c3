"""forklab's pure-Python core. Imports nothing from Django, Channels or DRF."""

from forklab.engine.canonical import canonical_equals, canonical_json
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.errors import ForklabError
from forklab.engine.events import REPLAY_VERSION, Event
from forklab.engine.fork import (
    Budget,
    ForkPoint,
    ForkResult,
    Policy,
    RunDiff,
    change,
    diff_runs,
    fork,
    fork_points,
    format_run_diff,
    parse_changes,
    parse_point,
    prepare_fork,
)
from forklab.engine.fork.continuing import answer_run, resume_run
from forklab.engine.fork.fidelity import fork_check
from forklab.engine.fork.lifecycle import Case, promote, run_case, save_case
from forklab.engine.fork.replay import replay
from forklab.engine.fork.sweep import SweepResult, estimate_sweep, fork_each
from forklab.engine.graph import (
    AgentNode,
    AgentSpec,
    ApprovalNode,
    Edge,
    GraphSpec,
    RoleSpec,
    RouterNode,
    SubgraphNode,
    ToolNode,
    graph_json_schema,
    load_graph,
    loads_graph,
    parse_graph,
)
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import RecordedRun, load_run, run, run_recorded
from forklab.engine.reducers import evolve, fold
from forklab.engine.runner import CancelToken, Runner
from forklab.engine.state import RunState
from forklab.engine.store import MemoryStore, Store

__all__ = [
    "Budget", "Case", "ForkPoint", "ForkResult", "Policy", "RunDiff", "SweepResult", "change",
    "diff_runs", "estimate_sweep", "fork", "fork_check", "fork_each", "fork_points",
    "format_run_diff", "parse_changes", "parse_point", "prepare_fork", "promote", "replay",
    "run_case", "save_case",
    "REPLAY_VERSION", "AgentNode", "AgentSpec", "ApprovalNode", "CancelToken", "Edge",
    "Environment", "Event", "FixedClock", "ForklabError", "GraphSpec", "HumanAnswer",
    "MemoryStore", "RecordedRun", "RoleSpec", "RouterNode", "RunState", "Runner", "Store",
    "SubgraphNode", "ToolNode", "answer_run", "canonical_equals", "canonical_json",
    "counter_ids", "evolve", "fold", "graph_json_schema", "load_graph", "load_run",
    "loads_graph", "parse_graph", "resume_run", "run", "run_recorded",
]
