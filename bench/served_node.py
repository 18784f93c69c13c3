"""CPU microseconds per served node of a fork tail's burst (issue 11, branch ``tail2``).

    .venv/bin/python bench/fork_split.py record DIR      # once: DIR/worker0 (the fan-out)
    .venv/bin/python bench/served_node.py DIR            # one null fork of it, fresh process
    .venv/bin/python bench/served_node.py DIR worker0    # the worker-0 fork instead

Forks the recorded 1,000-worker fan-out before ``w0`` with no change, memoize on: every
tail node (1,000 workers and the join) is a memo hit served as one ``node.reused`` event,
nothing is called. With ``worker0``, the fork changing w0's prompt (bench/fork_split.py's):
w0 and the join call the 20 ms model, the 999 served workers are predicted during w0's call
(``Scheduler.prefetch``, inside ``tail`` but in none of the parts) and served after it. The graph's fingerprint-parts pass (one per graph, not per node) is made
before the tail starts, so what is left is what each served node costs. Prints the tail's
CPU time per served node and its parts: ``predict`` (``Scheduler.predict_head``: its
execution, read slice, fingerprint and memo lookup), ``serve`` (``Runner._reuse``: the event
built and folded into the state) and ``store`` (``Runner.flush``: the bodies encoded and
appended), each as ``time.process_time()`` per served node. Fork in a fresh process each
time and interleave trees with ``PYTHONPATH=<tree>`` to compare them (docs/benchmarks.md).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.peers import forklab_peer
from bench.peers.model import FakeModel
from bench.peers.outcome import load_meta
from forklab.engine import fork, runner, scheduler
from forklab.engine.sqlite_store import SqliteStore

N = 1000


def _timed(spent: dict[str, float], name: str, func: Callable[..., Any],
           inner: list[float]) -> Callable[..., Any]:
    """``func`` timed into ``spent[name]``, less what timed calls inside it took (a flush
    made inside ``_reuse`` counts as ``store`` only)."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        inner.append(0.0)
        try:
            return func(*args, **kwargs)
        finally:
            took = time.process_time() - started
            spent[name] += took - inner.pop()
            if inner:
                inner[-1] += took
    return wrapper


def main(directory: Path, kind: str) -> None:
    spent = dict.fromkeys(("tail", "predict", "serve", "store"), 0.0)
    served = 0
    resume = runner.Runner.resume_loop

    def tail(self: runner.Runner) -> Any:
        nonlocal served
        for node in self.graph.nodes:  # the graph's one fingerprint-parts pass, before
            self.graph.fingerprint_parts(node.id)
        started = time.process_time()
        try:
            return resume(self)
        finally:
            spent["tail"] += time.process_time() - started
            served = sum(1 for e in self.state.executions[self.state.fork.prefix_executions:]
                         if e.memo) if self.state.fork else 0

    runner.Runner.resume_loop = tail  # type: ignore[method-assign]
    inner: list[float] = []
    runner.Runner._reuse = _timed(  # type: ignore[method-assign]
        spent, "serve", runner.Runner._reuse, inner)
    runner.Runner.flush = _timed(  # type: ignore[method-assign]
        spent, "store", runner.Runner.flush, inner)
    scheduler.Scheduler.predict_head = _timed(  # type: ignore[method-assign]
        spent, "predict", scheduler.Scheduler.predict_head, inner)
    scratch = Path(tempfile.mkdtemp())
    try:
        shutil.copytree(directory / "worker0", scratch / "base")
        model = FakeModel(20)
        store = SqliteStore(scratch / "base" / forklab_peer.STORE)
        at, changed = forklab_peer.FORKS["worker0"](N)
        result = fork(load_meta(scratch / "base")["run_id"], store=store,
                      env=forklab_peer.environment(model), at=at,
                      change=changed if kind == "worker0" else None, policy={"memoize": True},
                      budget=forklab_peer.NO_BUDGET, ignore_budget=True)
        store.close()
    finally:
        shutil.rmtree(scratch)
    calls, expected = (2, N - 1) if kind == "worker0" else (0, N + 1)
    status = None if result.state is None else result.state.status
    if status != "completed" or model.calls != calls or served != expected:
        raise SystemExit(f"expected {expected} served nodes and {calls} calls: {status}, "
                         f"{model.calls} calls, {served} served")
    per = {name: spent[name] / served * 1e6 for name in spent}
    print(f"{kind} served={served} per node µs: tail={per['tail']:.1f} predict={per['predict']:.1f} "
          f"serve={per['serve']:.1f} store={per['store']:.1f} "
          f"other={per['tail'] - per['predict'] - per['serve'] - per['store']:.1f}")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([], ["worker0"]):
        sys.exit(__doc__)
    main(Path(sys.argv[1]), (sys.argv[2:] or ["null"])[0])
