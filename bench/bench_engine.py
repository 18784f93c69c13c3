"""Engine throughput: how fast runs are recorded and how fast their logs fold back into state.

Long runs come from a graph that loops over cheap nodes — two tool nodes (a registered
in-process tool that bumps a counter) and a rules router that ends the loop at the last
iteration — so the figures measure the engine (events, reducers, planner, store), not a
model. Each iteration appends 13 events; sizes are rounded to whole iterations.

Rows:
- ``record (memory)``: ``run_recorded`` into a ``MemoryStore`` (events appended per second);
- ``fold (memory)``: ``reducers.fold(store.read(run_id))`` on that log, best of ``--repeat``;
- ``record (sqlite)`` / ``read+fold (sqlite)``: the same against a ``SqliteStore`` file (one
  committed transaction per event; the read includes JSON decoding and ``from_wire``).

Only the in-memory fold has a target (``FOLD_TARGET``); the ratio column is the CPU-time
figure / target (wall time on a shared machine measures the other processes too; both print).
Figures are printed, never asserted: timings belong here, not in tests.

Run from the repository root: ``.venv/bin/python bench/bench_engine.py`` (``--help``).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forklab.engine.environment import Environment, FixedClock
from forklab.engine.graph import GraphSpec, parse_graph
from forklab.engine.recording import run_recorded
from forklab.engine.reducers import fold
from forklab.engine.sqlite_store import SqliteStore
from forklab.engine.store import MemoryStore, Store
from forklab.engine.tools import ToolContext

FOLD_TARGET = 200_000.0  # events/s, in memory
EVENTS_PER_ITERATION = 13  # 2 tool nodes x 5 events + 1 router x 3 events
TOOL = "bench.tick"


def tick(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"counter": int(args.get("counter", 0)) + 1}


def loop_graph(iterations: int) -> GraphSpec:
    """a -> b -> loop -> a ... until ``$iteration`` reaches ``iterations``."""
    tool = {"kind": "tool", "tool": TOOL, "reads": ["counter"], "writes": ["counter"]}
    return parse_graph({
        "id": f"bench-loop-{iterations}", "start": "a", "max_iterations": iterations,
        "nodes": [
            {"id": "a", **tool}, {"id": "b", **tool},
            {"id": "loop", "kind": "router", "reads": ["counter"], "default": "a",
             "rules": [{"when": [{"key": "$iteration", "op": "gte", "value": iterations}],
                        "to": "end"}]},
        ],
        "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "loop"}],
    })


def environment() -> Environment:
    env = Environment(clock=FixedClock())
    env.tools.register(TOOL, tick)
    return env


def iterations_for(events: int) -> int:
    return max(1, min(10_000, round((events - 2) / EVENTS_PER_ITERATION)))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def record(store: Store, iterations: int) -> tuple[float, str, int]:
    """(seconds, run id, events) of recording the loop graph into ``store``."""
    seconds, recorded = timed(lambda: run_recorded(loop_graph(iterations), {"counter": 0},
                                                   store=store, env=environment()))
    if recorded.state.status != "completed":
        raise SystemExit(f"bench run ended {recorded.state.status}: {recorded.state.error}")
    return seconds, recorded.run_id, recorded.state.version


def cpu_timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call.

    On a shared, loaded machine the wall time mostly measures the other processes; the
    process's CPU time (user + sys) is what the code costs, so ratios are taken on it.
    """
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, float]:
    """The best wall and the best CPU time of ``repeat`` calls."""
    runs = [cpu_timed(fn) for _ in range(repeat)]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def row(name: str, events: int, seconds: float | tuple[float, float],
        target: float | None = None) -> list[str]:
    wall, cpu = seconds if isinstance(seconds, tuple) else (seconds, None)
    rate = events / wall if wall else float("inf")
    if cpu is None:
        return [name, f"{events:,}", f"{wall:.4f}", "—", f"{rate:,.0f}", "—",
                f"{target:,.0f}" if target else "—", f"{rate / target:.2f}" if target else "—"]
    cpu_rate = events / cpu if cpu else float("inf")
    return [name, f"{events:,}", f"{wall:.4f}", f"{cpu:.4f}", f"{rate:,.0f}",
            f"{cpu_rate:,.0f}", f"{target:,.0f}" if target else "—",
            f"{cpu_rate / target:.2f}" if target else "—"]


def print_table(rows: list[list[str]]) -> None:
    header = ["measurement", "events", "wall s", "cpu s", "events/s", "events/cpu-s",
              "target", "ratio (cpu)"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths, strict=True))))


def memory_rows(size: int, repeat: int) -> list[list[str]]:
    store = MemoryStore()
    seconds, run_id, events = record(store, iterations_for(size))
    log = store.read(run_id)
    folded = best_of(repeat, lambda: fold(log))
    return [row("record (memory)", events, seconds),
            row("fold (memory)", events, folded, FOLD_TARGET)]


def sqlite_rows(size: int, repeat: int) -> list[list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "bench.sqlite3")
        seconds, run_id, events = record(store, iterations_for(size))
        read = best_of(repeat, lambda: store.read(run_id))
        read_fold = best_of(repeat, lambda: fold(store.read(run_id)))
        store.close()
    return [row("record (sqlite)", events, seconds), row("read (sqlite)", events, read),
            row("read+fold (sqlite)", events, read_fold)]


def profile_fold(size: int) -> None:
    store = MemoryStore()
    _, run_id, _ = record(store, iterations_for(size))
    log = store.read(run_id)
    profiler = cProfile.Profile()
    profiler.runcall(fold, log)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000],
                        help="approximate events per run (in-memory rows)")
    parser.add_argument("--sqlite-size", type=int, default=10_000,
                        help="events of the SQLite rows (0 skips them)")
    parser.add_argument("--repeat", type=int, default=3, help="folds timed; the best counts")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile one fold of the largest size instead of the table")
    args = parser.parse_args(argv)
    if args.profile:
        profile_fold(max(args.sizes))
        return
    rows: list[list[str]] = []
    for size in args.sizes:
        rows += memory_rows(size, args.repeat)
    if args.sqlite_size:
        rows += sqlite_rows(args.sqlite_size, args.repeat)
    print(f"python {sys.version.split()[0]}; fold target {FOLD_TARGET:,.0f} events/s in memory; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (ratios on CPU time)")
    print_table(rows)


if __name__ == "__main__":
    main()
