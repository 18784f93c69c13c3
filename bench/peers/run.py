"""Run the peer comparison: every system, every measurement, each in a fresh process.

``.venv/bin/python -m bench.peers [--n 1000] [--repeat 3] [--only forklab langgraph]``

For each repeat, each shape and each system: one process records the shape into a fresh
directory (timed: the recording row; sized: the store row); then, per fork measurement of
that shape, the directory is copied and one process forks the copy (timed; the bytes the
fork added are sized). Systems are interleaved within a repeat so a change of machine load
touches all of them. Medians over the repeats are printed as markdown tables.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers import report
from bench.peers.outcome import Outcome, load_meta
from bench.peers.sizes import store_bytes
from bench.peers.worker import SYSTEMS
from bench.peers.workloads import FANOUT_LATENCY_MS, MEASUREMENTS, SHAPES, Measurement

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Sample:
    """One measurement of one system in one repeat (``error`` set when it failed)."""

    seconds: float = 0.0
    calls: int = 0
    size_bytes: int | None = None
    checks: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class Options:
    n: int
    repeat: int
    systems: list[str]
    shapes: list[str]
    fanout_latency_ms: float
    timeout_s: float
    workdir: Path | None


Results = dict[tuple[str, str], list[Sample]]


def run_worker(system: str, measurement: Measurement, directory: Path,
               options: Options) -> Outcome:
    """One measurement in a fresh interpreter; raises RuntimeError with its stderr tail."""
    command = [sys.executable, "-m", "bench.peers.worker", system, measurement.name,
               "--n", str(options.n), "--dir", str(directory),
               "--fanout-latency-ms", str(options.fanout_latency_ms)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=options.timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {options.timeout_s:.0f} s") from None
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise RuntimeError(tail[0][:200])
    try:
        return Outcome(**json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError, TypeError):
        raise RuntimeError(f"unreadable output: {done.stdout[-200:]!r}") from None


def expected_record_calls(shape: str, n: int) -> int:
    return n if shape == "chain" else n + 1


def check(measurement: Measurement, outcome: Outcome, base_final: str, n: int) -> list[str]:
    """What the run got wrong, if anything: the harness verifies every system the same way."""
    problems = []
    if measurement.fork is None and outcome.calls != expected_record_calls(measurement.shape, n):
        problems.append(f"recording made {outcome.calls} calls, expected "
                        f"{expected_record_calls(measurement.shape, n)}")
    if measurement.fork == "null" and outcome.final != base_final:
        problems.append("the null fork's final answer differs from the base's")
    if measurement.fork in ("last", "worker0") and outcome.final == base_final:
        problems.append("the changed fork's final answer equals the base's")
    return problems


def measure(system: str, measurement: Measurement, directory: Path, options: Options,
            base_final: str = "") -> Sample:
    before = store_bytes(directory) if measurement.fork else 0
    try:
        outcome = run_worker(system, measurement, directory, options)
    except RuntimeError as exc:
        return Sample(error=str(exc))
    return Sample(seconds=outcome.seconds, calls=outcome.calls,
                  size_bytes=store_bytes(directory) - before,
                  checks=check(measurement, outcome, base_final, options.n))


def run_shape(shape: str, system: str, root: Path, options: Options, results: Results) -> None:
    """Record ``shape`` on ``system``, then each fork of it on its own copy of the store."""
    recording = next(m for m in MEASUREMENTS if m.shape == shape and m.fork is None)
    base = root / f"{system}-{shape}"
    base.mkdir()
    sample = measure(system, recording, base, options)
    _keep(results, recording, system, sample)
    for measurement in (m for m in MEASUREMENTS if m.shape == shape and m.fork):
        if sample.error:
            _keep(results, measurement, system, Sample(error="its recording failed"))
            continue
        copy = root / f"{system}-{measurement.name}"
        shutil.copytree(base, copy)
        forked = measure(system, measurement, copy, options, load_meta(base)["final"])
        _keep(results, measurement, system, forked)
        shutil.rmtree(copy)


def _keep(results: Results, measurement: Measurement, system: str, sample: Sample) -> None:
    results[(measurement.name, system)].append(sample)
    figure = f"error: {sample.error}" if sample.error else (
        f"{sample.seconds:.3f} s, {sample.calls} calls"
        + (f", {sample.size_bytes:,} B" if sample.size_bytes else ""))
    print(f"  {system:<16} {measurement.name:<14} {figure}", file=sys.stderr, flush=True)


def run_all(options: Options) -> Results:
    results: Results = defaultdict(list)
    for repeat in range(1, options.repeat + 1):
        print(f"repeat {repeat}/{options.repeat}", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="forklab-peers-", dir=options.workdir) as tmp:
            for shape in options.shapes:
                for system in options.systems:
                    run_shape(shape, system, Path(tmp), options, results)
    return results


PEER_MODULES = {"activegraph": ("activegraph",),
                "langgraph": ("langgraph.graph", "langgraph.checkpoint.sqlite"),
                "langgraph-cache": ("langgraph.graph", "langgraph.checkpoint.sqlite")}


def installed(system: str) -> bool:
    """Whether the modules a system's worker imports are there (forklab's always are).

    Submodules, not ``langgraph``: that is a namespace package which the checkpoint
    packages provide even when LangGraph itself is absent.
    """
    try:
        return all(importlib.util.find_spec(m) is not None for m in PEER_MODULES.get(system, ()))
    except ModuleNotFoundError:  # a parent package is missing altogether
        return False


def parse(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="nodes in a chain / workers")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--only", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                        metavar="SYSTEM", help=f"systems to run: {', '.join(SYSTEMS)}")
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--fanout-latency-ms", type=float, default=FANOUT_LATENCY_MS)
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds one measurement process may take")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the stores are written (default: the temp directory)")
    args = parser.parse_args(argv)
    if args.n < 2 or args.repeat < 1:
        parser.error("--n must be at least 2 and --repeat at least 1")
    if args.workdir is not None and not args.workdir.is_dir():
        parser.error(f"--workdir {args.workdir} is not a directory")
    systems = [s for s in SYSTEMS if s in args.only]  # forklab first: the ratios' base
    missing = [s for s in systems if not installed(s)]
    if missing:
        parser.error(f"{', '.join(missing)} not installed: .venv/bin/pip install -e '.[bench]' "
                     "(the bench extra), or leave them out with --only")
    return Options(n=args.n, repeat=args.repeat, systems=systems, shapes=args.shapes,
                   fanout_latency_ms=args.fanout_latency_ms, timeout_s=args.timeout,
                   workdir=args.workdir)


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    load_before = os.getloadavg()
    results = run_all(options)
    print(report.render(results, options, load_before, os.getloadavg()))
    failed = any(s.error or s.checks for samples in results.values() for s in samples)
    return 1 if failed else 0
