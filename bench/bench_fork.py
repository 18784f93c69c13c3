"""Fork benchmarks: setup, null forks, sweeps and diffs against the targets of issue 3.

Rows (figures are printed, never asserted; timings belong here, not in tests):

1. ``fork setup``: ``prepare_fork`` — resolve the point, rebuild the prefix by folding the
   base log, validate changes, estimate the tail — at the last node boundary of a 10k- and
   a 100k-event run (so the whole log is folded). *warm* starts from a loaded base
   (``load_base`` done once, as a sweep or the API does); *cold* includes ``load_base``
   (reading the log and folding the base's final state too). Figure: events folded per
   second (warm: the prefix; cold: the base log plus the prefix); target **≥ 200,000/s**.
2. ``null fork / record``: every demo scenario with a model call, recorded with 20 ms of
   simulated latency on every agent (``latency_ms=20`` patched into the graph), then forked
   at ``start`` with ``memoize`` and no change (the whole run is the tail; every call is
   served from the recording). Figure: fork wall time as a share of the recording's; target
   **≤ 5%**.
3. ``sweep``: 8 variants (a different prompt for ``diamond``'s ``left`` branch each) forked
   at ``start`` with ``memoize`` — ``fork_each(concurrency=4)`` against the same 8 forks run
   one after another. Figure: sweep wall time as a share of the sequential time (no target
   is set; 25% would be perfect 4-way parallelism).
4. ``diff_runs`` on 10,000-step paths: a real fork of a 10,000-step loop run diverging at
   its midpoint (5,000 re-executed steps), and synthetic paths with 1,000 scattered
   replacements, and with nothing in common. Target **< 200 ms**.

The ratio column is normalised so that **≥ 1.00 meets the target** (figure / target for
"at least" targets, target / figure for "at most" ones).

Long runs come from a graph looping over cheap nodes (two tool nodes calling an in-process
tool registered with ``env.tools.register``, and a rules router ending the loop at the last
iteration: 13 events and 3 steps per iteration).

Run from the repository root: ``.venv/bin/python bench/bench_fork.py`` (``--help``).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import TOOL, loop_graph, tick  # one looping graph for every bench

from forklab.engine import change, diff_runs, fork, fork_each
from forklab.engine.environment import Environment, FixedClock
from forklab.engine.fork.core import load_base, prepare_fork
from forklab.engine.graph import GraphSpec, parse_graph
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.state import Execution, RunState

SETUP_TARGET = 200_000.0  # events/s folded
NULL_FORK_TARGET = 0.05  # share of the recording's wall time
DIFF_TARGET_MS = 200.0
LATENCY_MS = 20
EVENTS_PER_ITERATION = 13
NO_BUDGET = {"max_live_calls": None, "max_cost_usd": None}
LAST_NODE = {"before_node": "a", "occurrence": "last"}  # the whole log is the prefix

Row = list[str]


# -- helpers -----------------------------------------------------------------------------------


def loop_run(iterations: int) -> RecordedRun:
    env = Environment(clock=FixedClock())
    env.tools.register(TOOL, tick)
    recorded = run_recorded(loop_graph(iterations), {"counter": 0}, env=env)
    if recorded.state.status != "completed":
        raise SystemExit(f"bench run ended {recorded.state.status}: {recorded.state.error}")
    return recorded


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def cpu_best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """Best wall seconds, best CPU seconds (this process, user + sys) and a result."""
    runs = []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        runs.append((time.perf_counter() - wall, time.process_time() - cpu, result))
    return min(r[0] for r in runs), min(r[1] for r in runs), runs[-1][2]


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    runs = [timed(fn) for _ in range(repeat)]
    return min(runs, key=lambda r: r[0])


def row(name: str, size: str, seconds: float, figure: str, target: str, ratio: float) -> Row:
    return [name, size, f"{seconds:.4f}", figure, target, f"{ratio:.2f}"]


def print_table(rows: list[Row]) -> None:
    header = ["measurement", "size", "seconds", "figure", "target", "ratio"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths, strict=True))))


# -- 1. fork setup -----------------------------------------------------------------------------


def setup_rows(sizes: list[int], repeat: int) -> list[Row]:
    rows = []
    for size in sizes:
        iterations = max(1, min(10_000, round((size - 2) / EVENTS_PER_ITERATION)))
        recorded = loop_run(iterations)
        base = load_base(recorded.run_id, store=recorded.store, env=recorded.env)
        warm, warm_cpu, plan = cpu_best_of(repeat, lambda b=base: prepare_fork(b, at=LAST_NODE))
        cold, cold_cpu, _ = cpu_best_of(repeat, lambda r=recorded: prepare_fork(
            load_base(r.run_id, store=r.store, env=r.env), at=LAST_NODE))
        prefix, log = plan.effective.seq, recorded.state.version
        label = f"{log:,} events"
        for name, seconds, cpu, folded in (("fork setup, warm", warm, warm_cpu, prefix),
                                           ("fork setup, cold", cold, cold_cpu, log + prefix)):
            rate = folded / cpu
            rows.append(row(name, label, seconds, f"{rate:,.0f} ev/cpu-s ({cpu:.3f} cpu s)",
                            f"≥ {SETUP_TARGET:,.0f}", rate / SETUP_TARGET))
    return rows


# -- 2. null fork vs recording -----------------------------------------------------------------


def with_latency(graph: GraphSpec, ms: int) -> GraphSpec:
    """``graph`` with ``latency_ms`` set on every agent (registry, inline, roles, instances)."""
    data = graph.to_wire()

    def patch(agent: Any) -> Any:
        return {**agent, "latency_ms": ms} if isinstance(agent, dict) else agent

    data["agents"] = {k: patch(a) for k, a in data.get("agents", {}).items()}
    for node in data["nodes"]:
        if node.get("agent") is not None:
            node["agent"] = patch(node["agent"])
        for role in (node.get("roles") or {}).values():
            role["agent"] = patch(role["agent"])
            role["instances"] = {i: patch(a) for i, a in (role.get("instances") or {}).items()}
    return parse_graph(data)


def record_with_latency(name: str) -> tuple[float, RecordedRun]:
    scenario = SCENARIOS[name]
    graph = with_latency(scenario.graph(), LATENCY_MS)
    decision = scenario.hitl_decision

    def hitl(request: dict[str, Any]) -> HumanAnswer | None:
        return HumanAnswer(decision=decision) if decision else None

    return timed(lambda: run_recorded(graph, dict(scenario.input), env=Environment(),
                                      hitl=hitl))


def null_fork_rows(repeat: int) -> list[Row]:
    rows, total_fork, total_record = [], 0.0, 0.0
    for name in sorted(SCENARIOS):
        recorded_s, recorded = record_with_latency(name)
        model_calls = sum(1 for c in recorded.state.calls if c.kind == "agent")
        if not model_calls:
            print(f"(skipped {name}: it makes no model call, so there is no latency to save)")
            continue
        fork_s, result = best_of(repeat, lambda r=recorded: fork(
            r, at="start", policy={"memoize": True}))
        assert {c["label"] for c in result.calls} == {"reused"}, result.explain()
        total_fork, total_record = total_fork + fork_s, total_record + recorded_s
        share = fork_s / recorded_s
        rows.append(row(f"null fork / record: {name}", f"{model_calls} model calls", fork_s,
                        f"{share:.2%}", f"≤ {NULL_FORK_TARGET:.0%}", NULL_FORK_TARGET / share))
    share = total_fork / total_record
    rows.append(row("null fork / record: all", f"{LATENCY_MS} ms/call", total_fork,
                    f"{share:.2%}", f"≤ {NULL_FORK_TARGET:.0%}", NULL_FORK_TARGET / share))
    return rows


# -- 3. sweep ----------------------------------------------------------------------------------


def sweep_rows(repeat: int, variants: int = 8, concurrency: int = 4) -> list[Row]:
    _, recorded = record_with_latency("diamond")
    specs = {f"v{i}": change.prompt("left", f"Do your part, variant {i}.")
             for i in range(variants)}

    def sequential() -> None:
        for spec in specs.values():
            fork(recorded, at="start", change=spec, policy={"memoize": True})

    def sweep() -> None:
        result = fork_each(recorded, at="start", variants=specs, concurrency=concurrency,
                           policy={"memoize": True})
        assert not result.errors, result.errors

    seq_s, _ = best_of(repeat, sequential)
    sweep_s, _ = best_of(repeat, sweep)
    share = sweep_s / seq_s
    return [
        row(f"{variants} sequential forks (diamond)", "memoize", seq_s, "1.00x", "—", 1.0),
        row(f"sweep, concurrency {concurrency}", f"{variants} variants", sweep_s,
            f"{share:.0%} ({1 / share:.1f}x faster)", "—", 1 / share),
    ]


# -- 4. diff -----------------------------------------------------------------------------------


def synthetic(nodes: list[str]) -> RunState:
    state = RunState(status="completed")
    counts: dict[str, int] = {}
    for i, node in enumerate(nodes):
        counts[node] = counts.get(node, 0) + 1
        state.executions.append(Execution(
            node=node, kind="tool", occurrence=counts[node], iteration=1, start_seq=i,
            fingerprint="", reads={}, started_at=0.0, status="completed",
            writes={"out": i}))
    return state


def diff_rows(repeat: int, steps: int = 10_000) -> list[Row]:
    recorded = loop_run(round(steps / 3))
    middle = recorded.state.iteration // 2
    variant = fork(recorded, at={"before_iteration": middle}, budget=NO_BUDGET,
                   change=change.memory(set={"counter": 10**6}))
    nodes = [f"n{i % 7}" for i in range(steps)]
    replaced = list(nodes)
    for i in random.Random(7).sample(range(steps), 1000):
        replaced[i] = "other"
    cases = [
        ("diff_runs: fork diverging mid-way", recorded.state, variant.state),
        ("diff_runs: 1,000 scattered edits", synthetic(nodes), synthetic(replaced)),
        ("diff_runs: nothing in common", synthetic(nodes),
         synthetic([f"m{i % 5}" for i in range(steps)])),
    ]
    rows = []
    for name, base, other in cases:
        seconds, _ = best_of(repeat, lambda b=base, o=other: diff_runs(b, o))
        size = f"{len(base.executions):,} x {len(other.executions):,}"
        rows.append(row(name, size, seconds, f"{seconds * 1000:.1f} ms",
                        f"< {DIFF_TARGET_MS:.0f} ms", DIFF_TARGET_MS / (seconds * 1000)))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000],
                        help="approximate events of the runs fork setup is timed on")
    parser.add_argument("--repeat", type=int, default=3, help="runs timed; the best counts")
    parser.add_argument("--only", choices=["setup", "null", "sweep", "diff"], nargs="+",
                        help="run only these sections")
    args = parser.parse_args(argv)
    sections = {
        "setup": lambda: setup_rows(args.sizes, args.repeat),
        "null": lambda: null_fork_rows(args.repeat),
        "sweep": lambda: sweep_rows(args.repeat),
        "diff": lambda: diff_rows(args.repeat),
    }
    rows: list[Row] = []
    for name, build in sections.items():
        if not args.only or name in args.only:
            rows += build()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; best of {args.repeat}; ratio >= 1.00 meets the target "
          "(fork setup: on CPU time)")
    print_table(rows)


if __name__ == "__main__":
    main()
