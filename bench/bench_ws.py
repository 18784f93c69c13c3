"""Websocket stream throughput: events/s of a run's backlog streamed over ``/ws/runs/<id>/``.

A 10,000-event run (the loop graph of ``bench_fork.py``: cheap tool nodes, 13 events per
iteration) is recorded in memory and appended to a fresh database in one transaction; then a
``WebsocketCommunicator`` connects in-process through the real ASGI stack (token auth, URL
router, ``RunStreamConsumer``) with ``?after=0`` and receives until ``stream.status``.

Rows (figures are printed, never asserted; timings belong here, not in tests):

- ``read pages``: ``streams.read_page`` alone, 500 events a page — the ORM read and the Event
  JSON shape, no websocket (the ceiling for the stream).
- ``stream json``: connect → every event → ``stream.status``, JSON frames.
- ``stream html``: the same with ``?format=html`` (one template render per event).
- ``stream json, after=N/2``: the second half only (a reconnect mid-run).
- ``connect + status only``: ``?after=<last seq>`` — the fixed cost of one connection (auth,
  access check, group join, one page read, the status frame); its events/s column is
  connections/s.

SQLite by default (a temporary file); ``--postgres URL`` runs against a scratch database
created on that server (and dropped afterwards).

Run from the repository root: ``.venv/bin/python bench/bench_ws.py`` (``--help``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

Row = list[str]


def configure(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("FORKLAB_LOG_LEVEL", "WARNING")
    os.environ["DJANGO_SETTINGS_MODULE"] = "forklab.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed(events: int) -> tuple[str, str, int]:
    """A project, a member with a token, and one recorded ~``events``-event run."""
    from bench_fork import EVENTS_PER_ITERATION, loop_run
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from forklab.runs.models import Membership, Project, Role
    from forklab.runs.store import DjangoStore

    project = Project.objects.create(slug=f"bench-{uuid.uuid4().hex[:6]}", name="bench")
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:6]}")
    Membership.objects.create(user=user, project=project, role=Role.VIEWER)
    recorded = loop_run(max(1, round((events - 2) / EVENTS_PER_ITERATION)))
    store = DjangoStore(project)
    store.save_graph(recorded.graph)
    log = recorded.store.read(recorded.run_id)
    store.append(recorded.run_id, log, expected_seq=0)
    return recorded.run_id, Token.objects.create(user=user).key, len(log)


async def stream(run_id: str, token: str, query: str) -> int:
    from channels.testing import WebsocketCommunicator

    from forklab.asgi import application

    ws = WebsocketCommunicator(application, f"/ws/runs/{run_id}/?{query}", headers=[
        (b"origin", b"http://localhost"), (b"host", b"localhost"),
        (b"authorization", f"Token {token}".encode())])
    connected, _ = await ws.connect(timeout=30)
    assert connected
    received = 0
    while True:
        frame = await ws.receive_from(timeout=60)
        if "stream.status" in frame or 'id="live-status"' in frame:
            break
        received += 1
    await ws.disconnect()
    return received


def read_pages(run_id: str) -> int:
    from forklab.runs.streams import read_page

    after, count = 0, 0
    while True:
        page = read_page(run_id, after)
        if not page.events:
            return count
        count += len(page.events)
        after = page.events[-1]["seq"]


def timed(fn: Any, repeat: int) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(repeat):
        started = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - started)
    return best, count


def rows(run_id: str, token: str, total: int, repeat: int) -> list[Row]:
    half = total // 2
    cases: list[tuple[str, Any]] = [
        ("read pages (no websocket)", lambda: read_pages(run_id)),
        ("stream json", lambda: asyncio.run(stream(run_id, token, "after=0"))),
        ("stream html", lambda: asyncio.run(stream(run_id, token, "after=0&format=html"))),
        (f"stream json, after={half}",
         lambda: asyncio.run(stream(run_id, token, f"after={half}"))),
        ("connect + status only (after=last)",
         lambda: asyncio.run(stream(run_id, token, f"after={total}")) or 1),
    ]
    table = []
    for name, fn in cases:
        try:
            seconds, count = timed(fn, repeat)
        except Exception as exc:  # e.g. a template being restyled: report, keep the others
            table.append([name, "-", "-", f"failed: {type(exc).__name__}"])
            continue
        table.append([name, str(count), f"{seconds:.3f}", f"{count / seconds:,.0f}"])
    return table


def print_table(table: list[Row]) -> None:
    header = ["measurement", "events", "seconds", "events/s"]
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header))]
    for line in [header, ["-" * w for w in widths], *table]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths, strict=True))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000, help="size of the run")
    parser.add_argument("--repeat", type=int, default=3, help="best of N")
    parser.add_argument("--postgres", metavar="URL",
                        help="a PostgreSQL server URL (a scratch database is created on it)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = None
        if args.postgres:
            scratch = f"forklab_bench_ws_{os.getpid()}"
            url = create_database(args.postgres, scratch)
        else:
            url = f"sqlite:///{tmp}/bench.sqlite3"
        try:
            configure(url)
            run_id, token, total = seed(args.events)
            table = rows(run_id, token, total, args.repeat)
        finally:
            if scratch:
                from django.db import connections

                connections.close_all()
                drop_database(args.postgres, scratch)
    from django.db import connection

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {connection.vendor}; "
          f"a {total}-event run; best of {args.repeat}")
    print_table(table)
    print(json.dumps({"events": total, "events_per_s": {
        r[0]: float(r[3].replace(",", "")) for r in table if r[1] != "-"}}))


def create_database(server_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server_url.rsplit("/", 1)[0] + f"/{name}"


def drop_database(server_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
