"""One measurement in its own process: ``python -m bench.peers.worker SYSTEM MEASUREMENT``.

Prints the :class:`~bench.peers.outcome.Outcome` as one JSON line on stdout. A recording
writes its store (and ``meta.json``) into ``--dir``; a fork runs on a directory holding a
copy of a recording (a warm fork first forks, untimed, a scratch copy of that copy). Only
the system measured is imported, so no other system's imports, caches or threads are in
the process.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.peers.outcome import Outcome
from bench.peers.workloads import MEASUREMENTS, latency_ms

SYSTEMS = ("forklab", "activegraph", "langgraph", "langgraph-cache")

Runner = Callable[[str, int, float, Path], Outcome]


def runners(system: str) -> tuple[Runner, Runner]:
    """(record, fork) of a system, imported only now."""
    if system == "forklab":
        from bench.peers import forklab_peer as fl

        return fl.record, fl.fork_run
    if system == "activegraph":
        from bench.peers import activegraph_peer as ag

        return ag.record, ag.fork_run
    from bench.peers import langgraph_peer as lg

    cache = system == "langgraph-cache"
    return (lambda *a: lg.record(*a, cache=cache)), (lambda *a: lg.fork_run(*a, cache=cache))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("system", choices=SYSTEMS)
    parser.add_argument("measurement", choices=[m.name for m in MEASUREMENTS])
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--fanout-latency-ms", type=float, required=True)
    args = parser.parse_args(argv)
    measurement = next(m for m in MEASUREMENTS if m.name == args.measurement)
    record, fork = runners(args.system)
    latency = latency_ms(measurement.shape, args.fanout_latency_ms)
    if measurement.fork is None:
        outcome = record(measurement.shape, args.n, latency, args.dir)
    else:
        if measurement.warm:  # the same fork first, on a scratch copy: its figures are dropped
            with tempfile.TemporaryDirectory(dir=args.dir.parent) as scratch:
                shutil.copytree(args.dir, Path(scratch) / "warm-up")
                fork(measurement.fork, args.n, latency, Path(scratch) / "warm-up")
        outcome = fork(measurement.fork, args.n, latency, args.dir)
    print(outcome.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
