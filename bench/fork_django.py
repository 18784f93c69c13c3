"""The server's fork path: a held base forked into the Django store (embedded SQLite).

    PYTHONPATH=. .venv/bin/python bench/fork_django.py [worker0|last] [N]

What ``bench/fork_split.py held`` measures into the engine's ``SqliteStore``, here into
``forklab.runs.store.DjangoStore`` — the store the dashboard's and the API's forks write to.
A fresh ``FORKLAB_VAR_DIR`` (so a fresh database, migrated) gets a project and the peers'
base (the 1,000-worker fan-out at 20 ms for ``worker0``, the 1,000-node chain at 0 ms for
``last``), recorded into an in-memory store and appended in one go (the recording is not
what is measured). Then, timed one by one with ``time.process_time`` and ``perf_counter``:

- ``first``: ``runs.bases.loaded`` of the base (the per-process cache empty: the log read
  through the ORM, the stored ``FinalState`` row, the index built) and one fork of it — a
  server's first fork of a run;
- ``held``: N more forks of the base ``runs.bases`` now holds (default 15), each a fresh
  variant run with its events, its run row and final state written through the ORM — a
  server's second and later forks of a run;
- ``result``: after each of those forks, its worker's ``after_work`` step — storing the
  fork's result as it holds it (``ForkResultProjection.hold``, then ``after_run``) — and,
  for comparison, ``refresh``: the same result rebuilt from both logs, as a read finding no
  stored result does (and a worker did before it held results).
- ``storage``: the bytes the base takes in the database file and the bytes each fork (its
  result row included) added, per table with its indexes (SQLite's ``dbstat``).

Each fork is the peers' fork (``bench.peers.forklab_peer.FORKS``: memoize on, budgets
lifted) and must complete with the peers' call count (2 for ``worker0``, 1 for ``last``).
What this does not time: the HTTP request and the queue (``bench_accept.py`` times a fork
request's accept; the worker's ``drive`` adds loading the run row and its spec). Figures are
printed, never asserted.
"""

from __future__ import annotations

import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_web import setup_django

from bench.peers import forklab_peer
from bench.peers import workloads as w
from bench.peers.model import FakeModel

N = 1000
KINDS = {"worker0": ("fanout", 20, 2), "last": ("chain", 0, 1)}  # base shape, model ms, calls


def build(shape: str, model: FakeModel) -> tuple[Any, str]:
    """A project and the base run in the Django store: (that store, the base run's id)."""
    from forklab.engine import run_recorded
    from forklab.engine.store import MemoryStore
    from forklab.runs.services import ensure_project
    from forklab.runs.store import DjangoStore

    graph = forklab_peer.chain_graph(N) if shape == "chain" else forklab_peer.fanout_graph(N)
    recorded = run_recorded(graph, {"task": w.TASK}, store=MemoryStore(),
                            env=forklab_peer.environment(model))
    store = DjangoStore(ensure_project(slug="bench", name="Bench"))
    store.save_graph(graph)
    store.append(recorded.run_id, recorded.store.read(recorded.run_id), expected_seq=0)
    return store, recorded.run_id


def one_fork(kind: str, store: Any, run_id: str, model: FakeModel) -> tuple[float, ...]:
    """CPU and wall seconds of one fork of the base ``runs.bases`` holds (or loads), then
    the CPU seconds of its worker's ``after_work`` step: storing the fork's result (the
    one in hand, ``ForkResultProjection.hold``) and of rebuilding it from both logs instead
    (``refresh``: what a worker did before it held results)."""
    from forklab.engine import fork
    from forklab.runs import bases
    from forklab.runs.models import Run
    from forklab.runs.projections import ForkResultProjection
    from forklab.runs.store import DjangoStore

    at, changed = forklab_peer.FORKS[kind](N)
    env = forklab_peer.environment(model)
    run = Run.objects.get(pk=run_id)
    gc.collect()
    calls = model.calls
    cpu, wall = time.process_time(), time.perf_counter()
    result = fork(bases.loaded(run, env), store=store, at=at, change=changed,
                  policy={"memoize": True}, budget=forklab_peer.NO_BUDGET, ignore_budget=True)
    spent = time.process_time() - cpu, time.perf_counter() - wall
    if result.state.status != "completed" or model.calls - calls != KINDS[kind][2]:
        raise SystemExit(f"the fork ended {result.state.status} after "
                         f"{model.calls - calls} calls: {result.state.error}")
    cpu = time.process_time()
    ForkResultProjection.hold(result)
    ForkResultProjection.after_run(result.run_id, DjangoStore)
    held = time.process_time() - cpu
    variant = Run.objects.select_related("project").get(pk=result.run_id)
    cpu = time.process_time()
    ForkResultProjection.refresh(variant, DjangoStore(variant.project))
    return (*spent, held, time.process_time() - cpu)


def table_bytes() -> dict[str, int]:
    """Bytes of each table of the database file, its indexes counted with it (``dbstat``)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(m.tbl_name, d.name), SUM(d.pgsize) FROM dbstat d "
                       "LEFT JOIN sqlite_master m ON m.name = d.name GROUP BY 1")
        return {name: int(size) for name, size in cursor.fetchall()}


def grown(before: dict[str, int], after: dict[str, int], per: int) -> str:
    """The tables that grew from ``before`` to ``after``, in kB per one of ``per`` forks."""
    change = {name: (size - before.get(name, 0)) / per / 1000 for name, size in after.items()}
    shown = sorted((name for name, kb in change.items() if kb >= 1), key=lambda n: -change[n])
    total = sum(change.values())
    return f"{total:.0f} kB (" + ", ".join(f"{n} {change[n]:.0f}" for n in shown) + ")"


def main(argv: list[str]) -> None:
    kind = argv.pop(0) if argv and argv[0] in KINDS else "worker0"
    if len(argv) > 1 or (argv and not argv[0].isdigit()):
        sys.exit(__doc__)
    times = int(argv[0]) if argv else 15
    shape, latency, _ = KINDS[kind]
    with tempfile.TemporaryDirectory() as var_dir:
        setup_django(var_dir)
        model = FakeModel(latency)
        empty = table_bytes()
        store, run_id = build(shape, model)
        base = table_bytes()
        first = one_fork(kind, store, run_id, model)
        held = [one_fork(kind, store, run_id, model) for _ in range(times)]
        forked = table_bytes()
    cpu, wall = sorted(f[0] for f in held), sorted(f[1] for f in held)
    print(f"{kind} django first: cpu={first[0]:.4f} wall={first[1]:.4f}")
    print(f"{kind} django held forks={times} cpu_min={cpu[0]:.4f} "
          f"cpu_med={statistics.median(cpu):.4f} wall_min={wall[0]:.4f} "
          f"wall_q1={wall[times // 4]:.4f} wall_med={statistics.median(wall):.4f}")
    print(f"{kind} django result: held cpu_med={statistics.median(f[2] for f in held):.4f} "
          f"rebuilt cpu_med={statistics.median(f[3] for f in held):.4f}")
    base_kb = (sum(base.values()) - sum(empty.values())) / 1000
    print(f"{kind} django storage: base {base_kb:.0f} kB; "
          f"each fork added {grown(base, forked, times + 1)}")

if __name__ == "__main__":
    main(sys.argv[1:])
