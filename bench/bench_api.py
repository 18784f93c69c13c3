"""REST API latency: ``POST /forks/`` (validate, plan and enqueue) and ``GET /runs/{id}/events/``
on a 10,000-event run.

A ~10,000-event run of the loop graph of ``bench_fork.py`` (cheap tool nodes, 13 events per
iteration) is recorded in memory and appended to a fresh database's Django store in one
transaction; a ``diamond`` run is recorded for comparison. Requests go through the whole
Django + DRF stack in-process (``django.test.Client`` with a token header: middleware,
authentication, the view, JSON rendering) — no network.

Rows (figures are printed, never asserted; timings belong here, not in tests):

- ``POST /forks/ (10k run, at end)``: a fork of the loop run before its last node — the
  request validates, loads the base (reads and folds the whole log), resolves the point,
  folds the prefix, estimates the tail and writes the queued fork. Background execution is
  off (django.tasks' dummy backend), so the row is the enqueue latency alone.
- ``POST /forks/ (diamond)``: the same for a 21-event run (the fixed cost).
- ``POST /forks/ again (same client_request_id)``: the idempotent replay (one lookup).
- ``GET /forks/{id}/ (finished fork)``: a memoized null fork of the loop run at its start
  (~10,000 events of its own), finished and stored the way a worker leaves it: the Fork
  shape with its result (diff, calls, explain…) — served from the stored ``ForkResult``
  row where this checkout has one (``forklab.runs.projections``), else rebuilt from both
  logs on every request.
- ``GET /forks/{id}/ cold``: the same with this process's caches of finished runs emptied
  before each request (the read model's view is rebuilt from the run row and the stored
  result row).
- ``GET /runs/{id}/ (the same fork)``: the Run shape of that fork.
- ``GET events, first page``: ``?limit=500`` from the start of the 10k run.
- ``GET events, deep page``: ``?after=9000&limit=500`` (a keyset page near the end).
- ``GET events, type filter``: ``?type=node.completed&after=5000&limit=500``.
- ``GET events, limit=5000``: one large page.

SQLite by default (a temporary file); ``--postgres URL`` uses a scratch database on that
server (created and dropped).

Run from the repository root: ``.venv/bin/python bench/bench_api.py`` (``--help``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

Row = list[str]


def configure(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("FORKLAB_LOG_LEVEL", "WARNING")
    # enqueue only: the fork rows measure the request, not a tail running beside it
    os.environ["FORKLAB_TASKS_BACKEND"] = "django.tasks.backends.dummy.DummyBackend"
    os.environ["DJANGO_SETTINGS_MODULE"] = "forklab.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed(events: int) -> dict[str, Any]:
    """A project, a member with a token, a ~``events``-event loop run and a diamond run."""
    from bench_fork import EVENTS_PER_ITERATION, loop_run
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from forklab.engine.scenarios import SCENARIOS
    from forklab.runs.models import Membership, Project, Role
    from forklab.runs.services import record_run
    from forklab.runs.store import DjangoStore

    project = Project.objects.create(slug=f"bench-{uuid.uuid4().hex[:6]}", name="bench")
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:6]}")
    Membership.objects.create(user=user, project=project, role=Role.MEMBER)
    recorded = loop_run(max(1, round((events - 2) / EVENTS_PER_ITERATION)))
    store = DjangoStore(project)
    store.save_graph(recorded.graph)
    log = recorded.store.read(recorded.run_id)
    store.append(recorded.run_id, log, expected_seq=0)
    diamond = record_run(project=project, graph=SCENARIOS["diamond"].graph(),
                         input=SCENARIOS["diamond"].input)
    return {"long": recorded.run_id, "events": len(log), "diamond": diamond.id,
            "token": Token.objects.create(user=user).key, **seed_fork(recorded, store)}


def seed_fork(recorded: Any, store: Any) -> dict[str, Any]:
    """A finished memoized null fork of the loop run at its start, as a worker leaves it."""
    from forklab.engine import fork

    variant = fork(recorded, at="start", policy={"memoize": True}, ignore_budget=True,
                   label="bench null fork")
    log = recorded.store.read(variant.run_id)
    store.append(variant.run_id, log, expected_seq=0)
    try:  # the worker stores a finished fork's result; older checkouts have no projection
        from forklab.runs.projections import ForkResultProjection
    except ImportError:
        pass
    else:
        import inspect

        from forklab.runs.store import DjangoStore

        # newer checkouts pass the store factory (projections do not import the store)
        takes_store = len(inspect.signature(ForkResultProjection.after_run).parameters) > 1
        ForkResultProjection.after_run(variant.run_id, *((DjangoStore,) if takes_store else ()))
    return {"fork": variant.run_id, "fork_events": len(log)}


def measure(fn: Callable[[int], Any], repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU milliseconds (``time.process_time``: this process, user + sys) of
    ``repeat`` calls, after one warm-up call."""
    fn(-1)
    wall, cpu = [], []
    for i in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        fn(i)
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    return wall, cpu


def p95(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def rows(world: dict[str, Any], repeat: int, only: list[str] | None = None) -> list[Row]:
    from django.test import Client

    client = Client(headers={"Authorization": f"Token {world['token']}"})
    long, total = world["long"], world["events"]

    def fork(base: str, at: Any, key: str | None = None) -> Callable[[int], Any]:
        def call(i: int) -> Any:
            # the same key must carry the same body (else idempotency_conflict)
            body = {"base_run": base, "at": at, "label": "bench" if key else f"bench {i}",
                    "client_request_id": key}
            response = client.post("/api/v1/forks/", body, content_type="application/json")
            assert response.status_code in (200, 202), response.json()
        return call

    def events(query: str, expect: int) -> Callable[[int], Any]:
        def call(_: int) -> Any:
            response = client.get(f"/api/v1/runs/{long}/events/?{query}")
            assert response.status_code == 200, response.json()
            assert len(response.json()["results"]) == expect
        return call

    def fork_detail(_: int) -> Any:
        response = client.get(f"/api/v1/forks/{world['fork']}/")
        assert response.status_code == 200, response.json()
        assert response.json()["diff"] is not None

    def fork_detail_cold(i: int) -> Any:
        try:  # the per-process caches of finished runs (the read model's views among them)
            from forklab.runs.readcache import clear_caches
        except ImportError:
            pass
        else:
            clear_caches()
        fork_detail(i)

    def run_detail(_: int) -> Any:
        response = client.get(f"/api/v1/runs/{world['fork']}/")
        assert response.status_code == 200, response.json()

    last = {"before_node": "a", "occurrence": "last"}
    cases: list[tuple[str, Callable[[int], Any], int]] = [
        (f"POST /forks/ ({total:,}-event run, at end)", fork(long, last), 0),
        ("POST /forks/ (diamond, 21 events)", fork(world["diamond"], "start"), 0),
        ("POST /forks/ again (same client_request_id)",
         fork(world["diamond"], "start", key="bench-key"), 0),
        (f"GET /forks/{{id}}/ (finished {world['fork_events']:,}-event fork)", fork_detail, 0),
        ("GET /forks/{id}/ cold (process caches emptied first)", fork_detail_cold, 0),
        ("GET /runs/{id}/ (the same fork)", run_detail, 0),
        ("GET events, first page (limit=500)", events("limit=500", 500), 500),
        ("GET events, deep page (after=9000)", events("after=9000&limit=500", 500), 500),
        ("GET events, type=node.completed", events(
            "type=node.completed&after=5000&limit=500", 500), 500),
        ("GET events, limit=5000", events("limit=5000", 5000), 5000),
    ]
    table = []
    for name, fn, page in cases:
        if only and not any(word in name for word in only):
            continue
        wall, cpu = measure(fn, repeat)
        table.append([name, str(len(wall)), f"{statistics.median(wall):.1f}",
                      f"{p95(wall):.1f}", f"{statistics.median(cpu):.1f}",
                      f"{p95(cpu):.1f}", str(page) if page else "—"])
    return table


def print_table(table: list[Row]) -> None:
    header = ["request", "n", "median ms", "p95 ms", "cpu median", "cpu p95", "events/page"]
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    for line in [header, ["-" * w for w in widths], *table]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths, strict=True))))


def scratch_postgres(url: str) -> tuple[str, Callable[[], None]]:
    import psycopg

    name = f"forklab_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return url.rsplit("/", 1)[0] + f"/{name}", drop


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000, help="approximate run length")
    parser.add_argument("--repeat", type=int, default=30, help="requests timed per row")
    parser.add_argument("--postgres", metavar="URL", help="run against PostgreSQL at URL")
    parser.add_argument("--only", nargs="+", metavar="TEXT",
                        help="time only the rows whose name contains one of these")
    args = parser.parse_args(argv)
    drop: Callable[[], None] = lambda: None  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        if args.postgres:
            url, drop = scratch_postgres(args.postgres)
        else:
            url = f"sqlite:///{tmp}/bench.sqlite3"
        try:
            configure(url)
            world = seed(args.events)
            from django.db import connection

            print(f"python {sys.version.split()[0]}; {connection.vendor}; run of "
                  f"{world['events']:,} events; {args.repeat} requests per row (+1 warm-up)")
            print_table(rows(world, args.repeat, args.only))
        finally:
            drop()


if __name__ == "__main__":
    main()
