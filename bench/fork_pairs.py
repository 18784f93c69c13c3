"""Forks from two trees in alternation, each tree in one long-lived process: paired figures.

    .venv/bin/python bench/fork_pairs.py BEFORE_TREE AFTER_TREE DIR [--kind last] [--pairs 30]
        [--after-dir DIR2]

Starts ``bench/fork_split.py serve DIR KIND`` (this checkout's script) once per tree, with
``PYTHONPATH`` the tree, and asks them for one fork each in turn (before-after, then after-before, and so on).
Each fork is timed in its process from a fresh copy of the base with the parsed-graph cache
cleared (``fork_split.one_fork``). A pair's two forks are a fraction of a second apart, so a
host whose speed changes between processes and over seconds (this one's did by half:
docs/benchmarks.md, eighth sitting) slows both alike; the per-pair ratio after/before is
what is compared, and its median and quartiles are printed with each tree's median. DIR is
``fork_split.py record``'s; when the two trees store runs in different file layouts, record
a base with each and give the after tree's as ``--after-dir`` (a tree opening a file of an
earlier layout would move it on every fresh copy, which the other tree does not pay).
What a fresh process pays once (first calls) is not in these
figures: ``fork_split.py fork`` interleaved with ``interleave.py`` measures that.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("fork_split.py")


def _worker(tree: Path, directory: Path, kind: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), "serve", str(directory), kind], cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree.resolve())},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _fork(worker: subprocess.Popen[str]) -> dict[str, float]:
    assert worker.stdin is not None and worker.stdout is not None
    worker.stdin.write("\n")
    worker.stdin.flush()
    line = worker.stdout.readline()
    if not line:
        raise SystemExit(f"fork_pairs: a worker stopped (exit {worker.wait()})")
    return {name: float(value) for name, value in
            (item.split("=") for item in line.split())}


def _pair(workers: list[subprocess.Popen[str]], i: int) -> tuple[dict[str, float],
                                                                   dict[str, float]]:
    """(before, after) of pair ``i``, asked in the order before-after on even pairs and
    after-before on odd ones: the second of two forks in a row may fare better or worse
    (an A/A run without the swap came out 1.5% apart)."""
    if i % 2 == 0:
        before = _fork(workers[0])
        return before, _fork(workers[1])
    after = _fork(workers[1])
    return _fork(workers[0]), after


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return q1, median, q3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--kind", default="worker0", choices=("worker0", "last"))
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=2, help="pairs run first and not kept")
    parser.add_argument("--after-dir", type=Path, default=None,
                        help="the after tree's own bases (default: DIR)")
    args = parser.parse_args(argv)
    workers = [_worker(args.before, args.directory, args.kind),
               _worker(args.after, args.after_dir or args.directory, args.kind)]
    try:
        pairs = [_pair(workers, i) for i in range(args.warmup + args.pairs)][args.warmup:]
    finally:
        for worker in workers:
            if worker.stdin is not None:
                worker.stdin.close()
            worker.wait()
    print(f"{'figure':<6} {'before':>9} {'after':>9}   after/before per pair: q1 / median / q3"
          f"   ({args.pairs} pairs, {args.kind})")
    for name in pairs[0][0]:
        before = [b[name] for b, _ in pairs]
        after = [a[name] for _, a in pairs]
        q1, median, q3 = _quartiles([a / b for b, a in zip(before, after, strict=True)])
        print(f"{name:<6} {statistics.median(before):>9.4f} {statistics.median(after):>9.4f}"
              f"   {q1:.3f} / {median:.3f} / {q3:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
