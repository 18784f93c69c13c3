"""Run one benchmark command from two trees in turn and print the medians of its figures.

    .venv/bin/python bench/interleave.py BEFORE_TREE AFTER_TREE [--pairs 8] -- \\
        bench/fork_split.py fork /tmp/fs worker0

Each pair runs the command once from BEFORE_TREE, then once from AFTER_TREE (``cwd`` and
``PYTHONPATH`` set to the tree, the command's script path taken relative to it), each in a
fresh process, with this interpreter. Every ``name=number`` in a run's output is collected,
and the medians per tree are printed side by side with the change. On a host whose speed
drifts (this one's fork CPU rose ~35% within an hour, docs/benchmarks.md), only figures
interleaved like this compare two commits; a before/after taken minutes apart does not.
A tree is any checkout: ``git worktree add /tmp/before <commit>``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

FIGURE = re.compile(r"(\w+)=([0-9]+(?:\.[0-9]+)?)")


def run(tree: Path, command: list[str]) -> dict[str, float]:
    """The ``name=number`` figures of one run of ``command`` from ``tree``."""
    out = subprocess.run([sys.executable, *command], cwd=tree,
                         env={**os.environ, "PYTHONPATH": str(tree)},
                         capture_output=True, text=True, check=True)
    return {name: float(value) for name, value in FIGURE.findall(out.stdout)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--pairs", type=int, default=8)
    if "--" not in argv:
        parser.error("give the command after --")
    split = argv.index("--")
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    figures: dict[Path, dict[str, list[float]]] = {args.before: defaultdict(list),
                                                   args.after: defaultdict(list)}
    for _ in range(args.pairs):
        for tree in (args.before, args.after):
            for name, value in run(tree, command).items():
                figures[tree][name].append(value)
    names = [n for n in figures[args.before] if n in figures[args.after]]
    print(f"{'figure':<12} {'before':>10} {'after':>10} {'change':>8}   "
          f"(medians of {args.pairs} interleaved pairs)")
    for name in names:
        before = statistics.median(figures[args.before][name])
        after = statistics.median(figures[args.after][name])
        change = f"{(after - before) / before:+.1%}" if before else "—"
        print(f"{name:<12} {before:>10.4f} {after:>10.4f} {change:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
