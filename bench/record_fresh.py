"""One recording in this (fresh) process, as the peer harness times it: CPU seconds.

``cd <tree> && PYTHONPATH=<tree> .venv/bin/python -m bench.record_fresh [chain|fanout] [N]``
builds the graph and records one run at 0 ms model latency into a temporary SQLite store
(``bench.peers.forklab_peer.record``), and prints its CPU seconds (``time.process_time()``,
all threads), its wall seconds, the events it stored per CPU second and the garbage
collections that ran inside it, by generation. Run it several times, alternating trees,
for a before/after: every run is a fresh process (first-use costs and the first full
collection included). ``python -m`` puts the current directory first on ``sys.path``, so
run it from the tree being measured (``PYTHONPATH`` alone does not choose the tree).
"""

from __future__ import annotations

import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.peers import forklab_peer
from bench.peers.outcome import load_meta
from forklab.engine.sqlite_store import SqliteStore


def main(argv: list[str]) -> None:
    shape = argv[0] if argv else "chain"
    n = int(argv[1]) if len(argv) > 1 else 1000
    collections = [0, 0, 0]

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collections[info["generation"]] += 1

    with tempfile.TemporaryDirectory() as directory:
        gc.callbacks.append(count)
        started = time.process_time()
        outcome = forklab_peer.record(shape, n, 0, Path(directory))
        cpu = time.process_time() - started
        gc.callbacks.remove(count)
        store = SqliteStore(Path(directory) / forklab_peer.STORE)  # after the timing
        events = store.last_seq(load_meta(Path(directory))["run_id"])
        store.close()
    print(f"{shape} {n}: cpu {cpu:.3f} s  wall {outcome.seconds:.3f} s  "
          f"{events} events, {events / cpu:,.0f} per CPU-second  "
          f"collections by generation {collections}")


if __name__ == "__main__":
    main(sys.argv[1:])
