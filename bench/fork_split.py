"""CPU seconds of one worker-0 fan-out fork, split into setup / tail / the rest.

    .venv/bin/python bench/fork_split.py record DIR        # record the 1,000-worker base once
    .venv/bin/python bench/fork_split.py fork DIR          # one fork of a fresh copy of it

Fork in a fresh process each time (the parsed-graph cache would otherwise hide setup):
``fork`` copies DIR, runs ``bench.peers.forklab_peer.fork_run("worker0", 1000, 20, copy)``
(20 ms model, 2 live calls) and prints ``time.process_time()`` of the whole fork, of fork
setup (``prepare_fork``), of the tail (``Runner.resume_loop``) and of the rest (opening the
variant: the fork graph's hash, ``run.forked``; the result's diff). Interleave trees with
``PYTHONPATH=<tree>`` to compare them (docs/benchmarks.md).
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
from forklab.engine import runner
from forklab.engine.fork import result

N, LATENCY_MS = 1000, 20


def _timed(spent: dict[str, float], name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return func(*args, **kwargs)
        finally:
            spent[name] += time.process_time() - started
    return wrapper


def main(op: str, directory: Path) -> None:
    if op == "record":
        directory.mkdir(parents=True, exist_ok=True)
        outcome = forklab_peer.record("fanout", N, LATENCY_MS, directory)
        print(f"recorded: {outcome.calls} calls, {outcome.seconds:.2f} s")
        return
    spent = {"setup": 0.0, "tail": 0.0}
    result.prepare_fork = _timed(spent, "setup", result.prepare_fork)  # type: ignore[attr-defined]
    runner.Runner.resume_loop = _timed(  # type: ignore[method-assign]
        spent, "tail", runner.Runner.resume_loop)
    scratch = Path(tempfile.mkdtemp())
    try:
        shutil.copytree(directory, scratch / "base")
        started = time.process_time()
        outcome = forklab_peer.fork_run("worker0", N, LATENCY_MS, scratch / "base")
        total = time.process_time() - started
    finally:
        shutil.rmtree(scratch)
    print(f"total={total:.3f} setup={spent['setup']:.3f} tail={spent['tail']:.3f} "
          f"other={total - spent['setup'] - spent['tail']:.3f} calls={outcome.calls}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("record", "fork"):
        sys.exit(__doc__)
    main(sys.argv[1], Path(sys.argv[2]))
