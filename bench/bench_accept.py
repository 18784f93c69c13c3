"""CPU of one ``POST /api/v1/forks/`` in process, on PostgreSQL, as ``bench_load.py``'s burst
sends it (token auth, its four-step chain base, an input patch at ``start``, the database
task backend so the queue's task row is written in the fork's transaction).

``django.test.Client`` with the token header (the whole Django + DRF stack, no network);
``time.process_time`` around each request (the process runs nothing else: the task backend
only inserts rows); ``--warmup`` accepts first, then ``--accepts`` measured. Prints the
median, p10 and p90 in ms of CPU per accept, the queries per accept, and the sha256 of the
first measured 202 body with its ids, times and queue position masked (so two checkouts
can be compared byte for byte). ``--profile FILE`` writes a cProfile of the measured
accepts instead of timing them one by one.

``--asgi N`` sends the accepts through the ASGI application daphne serves
(``forklab.asgi.application``: its request threads, ``FORKLAB_WEB_THREADS``) in bursts of
``N`` at once on one event loop, as one web process of ``bench_load.py`` receives them, and
reports CPU per accept over each burst (median of the bursts): the serving layer's share and
what concurrency adds show as the difference from the one-at-a-time figure.

``--tree DIR`` runs another checkout's code (its ``forklab`` first on ``sys.path``), e.g. a
``git worktree add /tmp/base 1a703ef``, so before/after pairs can be interleaved. A scratch
database is created on ``--postgres`` and dropped. Figures are printed, never asserted.

    .venv/bin/python bench/bench_accept.py --postgres postgres://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]


def setup(tree: Path, database_url: str) -> None:
    sys.path[:0] = [str(tree), str(tree / "bench")]
    os.environ.update(DATABASE_URL=database_url, FORKLAB_LOG_LEVEL="WARNING",
                      FORKLAB_TASKS_BACKEND="db", DJANGO_SETTINGS_MODULE="forklab.settings",
                      FORKLAB_SECRET_KEY="bench-accept", FORKLAB_ALLOWED_HOSTS="testserver")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed() -> tuple[str, str]:
    from bench_load import CHAIN
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from forklab.engine.graph import loads_graph
    from forklab.runs.models import Membership, Project, Role
    from forklab.runs.services import install_graph, record_run

    project = Project.objects.create(slug="load", name="Load")
    user = get_user_model().objects.create_user("load")
    Membership.objects.create(user=user, project=project, role=Role.MEMBER)
    graph = loads_graph(CHAIN.replace("LATENCY", "0"))
    install_graph(project=project, graph=graph)
    base = record_run(project=project, graph=graph, input={"topic": "a burst"}, user=user)
    return Token.objects.create(user=user).key, base.id


MASK = re.compile(r'("(?:id|created_at|updated_at|started_at|finished_at|queue_position|'
                  r'task_id|label)": ?)("[^"]*"|\d+|null)')


def masked_digest(content: bytes, base: str) -> tuple[str, str]:
    text = MASK.sub(r'\1"*"', content.decode().replace(base, "BASE"))
    text = re.sub(r"burst \d+", "burst N", text)
    return hashlib.sha256(text.encode()).hexdigest()[:16], text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--tree", type=Path, default=HERE)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--accepts", type=int, default=200)
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--asgi", type=int, default=0, metavar="N")
    parser.add_argument("--show-body", action="store_true")
    args = parser.parse_args()

    import psycopg

    scratch = f"forklab_bench_accept_{os.getpid()}"
    with psycopg.connect(args.postgres, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{scratch}"')
    try:
        setup(args.tree.resolve(), args.postgres.rsplit("/", 1)[0] + "/" + scratch)
        print(json.dumps(run(args)))
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')


def run(args: argparse.Namespace) -> dict[str, Any]:
    from django.db.backends import utils
    from django.test import Client

    token, base = seed()
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")

    def accept(n: int) -> Any:
        body = {"base_run": base, "at": "start", "label": f"load {n}",
                "changes": [{"kind": "input_patch", "patch": {"topic": f"burst {n}"}}]}
        response = client.post("/api/v1/forks/", body, content_type="application/json")
        assert response.status_code == 202, response.content
        return response

    for n in range(args.warmup):
        accept(n)
    queries: list[str] = []
    plain = utils.CursorWrapper._execute
    utils.CursorWrapper._execute = (  # type: ignore[method-assign]
        lambda self, sql, *rest: queries.append(sql) or plain(self, sql, *rest))
    try:
        first = accept(args.warmup)
    finally:
        utils.CursorWrapper._execute = plain  # type: ignore[method-assign]
    digest, text = masked_digest(first.content, base)
    if args.show_body:
        print(text)
    if args.asgi:
        return asgi_bursts(args, token, base, digest)
    if args.profile:
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        for n in range(args.accepts):
            accept(args.warmup + 1 + n)
        profiler.disable()
        profiler.dump_stats(args.profile)
        return {"profile": str(args.profile)}
    cpu = []
    for n in range(args.accepts):
        started = time.process_time()
        accept(args.warmup + 1 + n)
        cpu.append((time.process_time() - started) * 1000)
    deciles = statistics.quantiles(cpu, n=10)
    return {"tree": str(args.tree), "median_ms": round(statistics.median(cpu), 3),
            "p10_ms": round(deciles[0], 3), "p90_ms": round(deciles[-1], 3),
            "queries": len(queries), "body_sha": digest,
            "load": [round(x, 2) for x in os.getloadavg()]}


def asgi_bursts(args: argparse.Namespace, token: str, base: str, digest: str) -> dict[str, Any]:
    import asyncio

    from forklab.asgi import application

    async def post(n: int) -> int:
        body = json.dumps({"base_run": base, "at": "start", "label": f"load {n}", "changes": [
            {"kind": "input_patch", "patch": {"topic": f"burst {n}"}}]}).encode()
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/api/v1/forks/",
                 "raw_path": b"/api/v1/forks/", "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                             (b"authorization", f"Token {token}".encode()),
                             (b"content-length", str(len(body)).encode())],
                 "client": ("127.0.0.1", 40000 + n % 20000), "server": ("testserver", 80)}
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await application(scope, receive, send)
        return int(sent[0]["status"])

    async def burst(first: int) -> float:
        started = time.process_time()
        codes = await asyncio.gather(*(post(first + i) for i in range(args.asgi)))
        assert set(codes) == {202}, codes
        return (time.process_time() - started) * 1000 / args.asgi

    async def main() -> list[float]:
        await burst(10_000)  # the request threads' first use (their connections)
        return [await burst(20_000 + k * args.asgi) for k in range(max(3, args.accepts
                                                                       // args.asgi))]

    per_accept = asyncio.run(main())
    return {"tree": str(args.tree), "asgi_burst": args.asgi,
            "median_ms": round(statistics.median(per_accept), 3),
            "bursts_ms": [round(x, 2) for x in per_accept], "body_sha": digest,
            "load": [round(x, 2) for x in os.getloadavg()]}


if __name__ == "__main__":
    main()
