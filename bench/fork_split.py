"""CPU seconds of one fork of a recorded 1,000-node base, split into setup / tail / the rest.

    .venv/bin/python bench/fork_split.py record DIR          # record both bases once
    .venv/bin/python bench/fork_split.py fork DIR            # one worker-0 fan-out fork
    .venv/bin/python bench/fork_split.py fork DIR last       # one fork before a chain's last node
    .venv/bin/python bench/fork_split.py repeat DIR [last] [N]   # N forks in one process
    .venv/bin/python bench/fork_split.py serve DIR [last]        # a fork per stdin line
    .venv/bin/python bench/fork_split.py held DIR [last] [N]     # N forks of one loaded base

``record`` records the peers' 1,000-worker fan-out (20 ms model) into ``DIR/worker0`` and
their 1,000-node chain (0 ms) into ``DIR/last``. Fork in a fresh process each time (the
parsed-graph cache would otherwise hide setup): ``fork`` copies the base's directory, runs
``bench.peers.forklab_peer.fork_run(kind, 1000, latency, copy)`` — ``worker0`` changes
worker 0's prompt (2 live calls), ``last`` the last chain node's (1 live call) — and prints
``time.process_time()`` of the whole fork, of fork setup (``prepare_fork``; ``load`` of it is
``load_base``), of the tail (``Runner.resume_loop``) and of the rest (``other``: opening the
variant — ``open``, the fork graph's hash and ``run.forked`` — the result's diff — ``diff``
— and what is left); ``gc`` is the cyclic collector's share of the whole, wherever it ran.
Interleave trees with ``PYTHONPATH=<tree>`` to compare them
(docs/benchmarks.md); the phases a tree lacks are timed as zero.

``repeat`` forks the base N times (default 15) in this one process, each from a fresh copy
with the parsed-graph cache cleared (so every fork parses, validates and hashes its graphs
as a fresh process does), and prints the minimum and first quartile of the forks' CPU and
wall times. On a host whose speed swings from one process to the next, interleaved fresh
processes cannot separate a few percent; noise only ever adds time, so minima over many
forks can (docs/benchmarks.md, eighth sitting). What a fresh process pays once (first
calls, imports made inside the fork) is not in them: ``fork`` measures that.

``held`` loads the base once (``load_base``, untimed) and forks that one ``BaseRun`` N times
(default 15) into its store, printing the same figures: the server's path, whose
``runs.bases`` keeps a finished run's loaded base per process, so a second fork of a run
reads, folds and indexes nothing of it (the graph's parse is the loaded base's too).
"""

from __future__ import annotations

import gc
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.peers import forklab_peer
from bench.peers.model import FakeModel
from bench.peers.outcome import load_meta
from forklab.engine import fork as fork_of
from forklab.engine import graph as graph_module
from forklab.engine import runner
from forklab.engine.fork import core, result, variant
from forklab.engine.sqlite_store import SqliteStore

N = 1000
SHAPES = {"worker0": ("fanout", 20), "last": ("chain", 0)}  # kind -> (base shape, model ms)


def _timed(spent: dict[str, float], name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            spent[name] += time.process_time() - started
    return wrapper


def record(directory: Path) -> None:
    for kind, (shape, latency_ms) in SHAPES.items():
        (directory / kind).mkdir(parents=True, exist_ok=True)
        outcome = forklab_peer.record(shape, N, latency_ms, directory / kind)
        print(f"recorded {shape} for {kind}: {outcome.calls} calls, {outcome.seconds:.2f} s")


def fork(directory: Path, kind: str) -> None:
    spent = dict.fromkeys(("setup", "load", "tail", "open", "diff", "gc"), 0.0)
    collecting: list[float] = []

    def collector(phase: str, info: dict[str, int]) -> None:  # time inside the phases too
        if phase == "start":
            collecting.append(time.process_time())
        elif collecting:
            spent["gc"] += time.process_time() - collecting.pop()

    gc.callbacks.append(collector)
    result.prepare_fork = _timed(spent, "setup", result.prepare_fork)  # type: ignore[attr-defined]
    core.load_base = _timed(spent, "load", core.load_base)
    variant.begin_variant = _timed(spent, "open", variant.begin_variant)
    result.diff_runs = _timed(spent, "diff", result.diff_runs)  # type: ignore[attr-defined]
    runner.Runner.resume_loop = _timed(  # type: ignore[method-assign]
        spent, "tail", runner.Runner.resume_loop)
    scratch = Path(tempfile.mkdtemp())
    try:
        shutil.copytree(directory / kind, scratch / "base")
        started = time.process_time()
        outcome = forklab_peer.fork_run(kind, N, SHAPES[kind][1], scratch / "base")
        total = time.process_time() - started
    finally:
        shutil.rmtree(scratch)
    other = total - spent["setup"] - spent["tail"]
    print(f"{kind} total={total:.3f} setup={spent['setup']:.3f} tail={spent['tail']:.3f} "
          f"other={other:.3f} calls={outcome.calls} wall={outcome.seconds:.3f} | load={spent['load']:.3f} "
          f"open={spent['open']:.3f} diff={spent['diff']:.3f} gc={spent['gc']:.3f}")


@contextmanager
def fresh_base(directory: Path, kind: str) -> Iterator[Path]:
    """A scratch copy of the recorded base for ``kind``, removed afterwards, with the
    parsed-graph cache cleared (a fork from it parses its graphs, as a fresh process does)."""
    scratch = Path(tempfile.mkdtemp())
    try:
        shutil.copytree(directory / kind, scratch / "base")
        graph_module._parsed.clear()
        yield scratch / "base"
    finally:
        shutil.rmtree(scratch)


def one_fork(directory: Path, kind: str) -> tuple[float, float]:
    """CPU and wall seconds of one fork in this process, from a :func:`fresh_base`."""
    with fresh_base(directory, kind) as base:
        gc.collect()  # the last fork's garbage is not this one's to collect
        cpu_started, wall_started = time.process_time(), time.perf_counter()
        forklab_peer.fork_run(kind, N, SHAPES[kind][1], base)
        return time.process_time() - cpu_started, time.perf_counter() - wall_started


def serve(directory: Path, kind: str) -> None:
    """One fork per line read from stdin, its ``cpu= wall=`` printed (``fork_pairs.py``)."""
    for _ in sys.stdin:
        cpu, wall = one_fork(directory, kind)
        print(f"cpu={cpu:.5f} wall={wall:.5f}", flush=True)


def repeat(directory: Path, kind: str, times: int) -> None:
    timed = [one_fork(directory, kind) for _ in range(times)]
    cpu = sorted(c for c, _ in timed)
    wall = sorted(w for _, w in timed)
    q1 = times // 4
    print(f"{kind} forks={times} cpu_min={cpu[0]:.4f} cpu_q1={cpu[q1]:.4f} "
          f"wall_min={wall[0]:.4f} wall_q1={wall[q1]:.4f}")


def held(directory: Path, kind: str, times: int) -> None:
    at, changed = forklab_peer.FORKS[kind](N)
    model = FakeModel(SHAPES[kind][1])
    env = forklab_peer.environment(model)
    timed = []
    with fresh_base(directory, kind) as base_dir:
        store = SqliteStore(base_dir / forklab_peer.STORE)
        base = core.load_base(load_meta(base_dir)["run_id"], store=store, env=env)
        for _ in range(times):
            gc.collect()
            cpu_started, wall_started = time.process_time(), time.perf_counter()
            forked = fork_of(base, at=at, change=changed, policy={"memoize": True},
                             budget=forklab_peer.NO_BUDGET, ignore_budget=True)
            timed.append((time.process_time() - cpu_started, time.perf_counter() - wall_started))
            assert forked.state.status == "completed", forked.state.error
        store.close()
    cpu = sorted(c for c, _ in timed)
    wall = sorted(w for _, w in timed)
    q1, mid = times // 4, times // 2
    print(f"{kind} held forks={times} calls={model.calls / times:g} cpu_min={cpu[0]:.4f} "
          f"cpu_med={cpu[mid]:.4f} wall_min={wall[0]:.4f} wall_q1={wall[q1]:.4f} "
          f"wall_med={wall[mid]:.4f}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["record"] and len(args) == 2:
        record(Path(args[1]))
    elif args[:1] == ["fork"] and len(args) in (2, 3) and (args[2:] or ["worker0"])[0] in SHAPES:
        fork(Path(args[1]), (args[2:] or ["worker0"])[0])
    elif args[:1] == ["serve"] and len(args) in (2, 3) and (args[2:] or ["worker0"])[0] in SHAPES:
        serve(Path(args[1]), (args[2:] or ["worker0"])[0])
    elif args[:1] in (["repeat"], ["held"]) and 2 <= len(args) <= 4:
        rest = args[2:]
        kind = rest.pop(0) if rest and rest[0] in SHAPES else "worker0"
        if len(rest) > 1 or (rest and not rest[0].isdigit()):
            sys.exit(__doc__)
        (repeat if args[0] == "repeat" else held)(Path(args[1]), kind,
                                                  int(rest[0]) if rest else 15)
    else:
        sys.exit(__doc__)
