"""Instructions one fork (or one recording) executes, counted by valgrind's callgrind.

    .venv/bin/python bench/instructions.py fork DIR [worker0|last] [--warm N] [--runs R]
    .venv/bin/python bench/instructions.py record chain|fanout [N] [--runs R]
    .venv/bin/python bench/instructions.py fold [EVENTS] [--runs R]

Wall and CPU seconds on this shared, virtualised host swing by 2x between sittings and by
tens of percent between processes (docs/benchmarks.md, eighth sitting), so a change of a
few percent cannot be told from noise by timing it. An instruction count can: it is the
work done, whatever else the machine is doing. This runs the measured operation in a child
process under ``valgrind --tool=callgrind`` with collection off at start and toggled on
only inside ``functools.reduce`` (a C function nothing on forklab's paths calls), which
the child wraps around the one operation measured — imports, the base's copy and any warm-up
forks are not counted. Prints the instructions (``Ir``) of each run and their spread.

``fork`` forks a base recorded by ``bench/fork_split.py record DIR`` (from a fresh copy of
it, parsed-graph cache cleared, as ``fork_split.py repeat`` does): ``--warm 0`` (the
default) counts the first fork of a fresh process, first-use costs included, as the peer
harness times it; ``--warm 1`` counts a second fork after one uncounted. ``record`` counts
``bench.peers.forklab_peer.record`` into a fresh SQLite store (0 ms model). ``fold`` counts
``reducers.fold`` of ``bench/bench_engine.py``'s loop run of about EVENTS events (default
10,000; the events read from a ``MemoryStore`` before counting) — the fold target's work.

Threads: valgrind runs one thread at a time, so a fork's pool threads and the runner
interleave differently than natively, and the 20 ms model sleeps of the fan-out are long
beside a 50x slower interpreter (the runner finishes its predictions inside the first
call's window). The count is the same work either way — what differs between two runs of
one tree is how often a thread waited or woke (a few tenths of a percent; ``--runs``
shows it). Compare trees with ``PYTHONPATH=<tree>``, as for ``fork_split.py``. Each run
takes about a minute (the imports run under valgrind too, uncounted).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TOGGLE = "functools_reduce"
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def _counted(operation: Any) -> None:
    """Run ``operation`` inside ``functools.reduce``: the only instructions collected."""
    functools.reduce(lambda _, __: operation(), [None], None)


def _child(args: list[str]) -> None:
    from bench import fork_split
    from bench.peers import forklab_peer

    if args[0] == "fork":
        directory, kind, warm = Path(args[1]), args[2], int(args[3])
        for _ in range(warm):
            fork_split.one_fork(directory, kind)
        with fork_split.fresh_base(directory, kind) as base:
            latency = fork_split.SHAPES[kind][1]
            _counted(lambda: forklab_peer.fork_run(kind, fork_split.N, latency, base))
    elif args[0] == "fold":
        from bench import bench_engine
        from forklab.engine.reducers import fold
        from forklab.engine.store import MemoryStore

        store = MemoryStore()
        _, run_id, _ = bench_engine.record(store, bench_engine.iterations_for(int(args[1])))
        events = store.read(run_id)
        _counted(lambda: fold(events))
    else:
        shape, n = args[1], int(args[2])
        with tempfile.TemporaryDirectory() as directory:
            _counted(lambda: forklab_peer.record(shape, n, 0, Path(directory)))


def count_instructions(command: list[str]) -> int:
    """Instructions ``command`` (a Python process that wraps what it measures in
    :func:`_counted`) executes inside ``functools.reduce``, under callgrind. Anything it
    runs outside is not counted: imports, setup, interpreter start and exit."""
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--collect-atstart=no",
             f"--toggle-collect={TOGGLE}", f"--callgrind-out-file={out}/callgrind.out",
             *command],
            capture_output=True, text=True, check=False,
            env={**os.environ, "PYTHONHASHSEED": "0"})  # the same dict layouts every run
    found = COLLECTED.findall(done.stderr)
    if done.returncode or not found:
        sys.exit(f"the measured child failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return int(found[-1])


def _options(rest: list[str]) -> tuple[list[str], dict[str, int]]:
    options = {"--warm": 0, "--runs": 1}
    positional: list[str] = []
    while rest:
        word = rest.pop(0)
        if word in options and rest and rest[0].isdigit():
            options[word] = int(rest.pop(0))
        elif word.startswith("--"):
            sys.exit(__doc__)
        else:
            positional.append(word)
    return positional, options


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        _child(argv[1:])
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    positional, options = _options(argv[1:])
    if argv[:1] == ["fork"] and positional and len(positional) <= 2:
        kind = positional[1] if len(positional) == 2 else "worker0"
        if kind not in ("worker0", "last"):
            sys.exit(__doc__)
        child, label = ["fork", positional[0], kind, str(options["--warm"])], f"fork {kind}"
        label += f" (after {options['--warm']} warm)" if options["--warm"] else " (first in process)"
    elif argv[:1] == ["fold"] and len(positional) <= 1 and all(p.isdigit() for p in positional):
        events = positional[0] if positional else "10000"
        child, label = ["fold", events], f"fold of ~{events} events"
    elif argv[:1] == ["record"] and positional and positional[0] in ("chain", "fanout"):
        n = positional[1] if len(positional) > 1 else "1000"
        child, label = ["record", positional[0], n], f"record {positional[0]} {n}"
    else:
        sys.exit(__doc__)
    command = [sys.executable, __file__, "--child", *child]
    counts = [count_instructions(command) for _ in range(options["--runs"])]
    for count in counts:
        print(f"{label}: {count:,} instructions")
    if len(counts) > 1:
        spread = (max(counts) - min(counts)) / statistics.median(counts)
        print(f"{label}: median {statistics.median(counts):,.0f}, spread {spread:.2%}")


if __name__ == "__main__":
    main(sys.argv[1:])
