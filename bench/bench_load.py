"""Burst load: 100 concurrent fork requests and 100 websocket viewers against real servers.

Two deployments, both on loopback only, both started and stopped by this script:

- ``embedded``: one daphne on a fresh SQLite file, tails on its in-process thread pool
  (``FORKLAB_TASK_WORKERS``, default 4);
- ``scale``: two daphne processes and two ``db_worker`` processes on a scratch PostgreSQL
  database with the Redis channel layer (``--postgres``, ``--redis``).

A base run of a four-step chain graph (every step a scripted model call with
``--latency-ms`` of simulated latency) is recorded first. Then ``--forks`` fork requests
(each a different input patch, so every tail makes four live calls) are sent at once, spread
over the web processes; once all are answered a viewer per fork opens
``/ws/runs/<fork>/?after=0`` with a token (no ``Origin``: a script) and reads until the final
status (from seq 0: starting after the burst loses nothing). Printed per deployment:

- accept latency (p50, p95, max) of ``POST /api/v1/forks/`` — **target p95 <= 1 s** in
  scale-out (ratio = target / p95, >= 1.00 meets it), and the CPU the web processes spent
  per accepted request (from /proc: a figure that does not depend on what else the machine
  runs, unlike the latencies);
- time to drain: from the first request until every viewer saw its fork finish;
- events lost: for every fork, the seqs of its log (read back over the API) that its viewer
  never received — must be 0 — and duplicates (must be 0), across the reconnects a viewer
  makes when its connection fails (counted);
- the forks' final states, and the largest queue position reported at accept.

Nothing is asserted; figures are printed (a table, then one JSON line). The script stops by
itself (``--deadline`` seconds at most per deployment) and kills what it started.

    .venv/bin/python bench/bench_load.py                       # both deployments
    .venv/bin/python bench/bench_load.py --mode embedded --forks 20 --viewers 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
CHAIN = """
id: load-chain
start: outline
agents:
  writer: {model: scripted-small, system_prompt: Write carefully., temperature: 0.3,
           latency_ms: LATENCY}
nodes:
  - {id: outline, kind: agent, agent: writer, reads: [topic], writes: [outline],
     prompt: "Outline: {topic}"}
  - {id: draft, kind: agent, agent: writer, reads: [outline], writes: [draft],
     prompt: "Draft from: {outline}"}
  - {id: polish, kind: agent, agent: writer, reads: [draft], writes: [final],
     prompt: "Polish: {draft}"}
  - {id: review, kind: agent, agent: writer, reads: [final], writes: [review],
     prompt: "Review: {final}"}
edges:
  - {from: outline, to: draft}
  - {from: draft, to: polish}
  - {from: polish, to: review}
"""
FINAL = ("completed", "failed", "blocked", "cancelled")


# -- the child side: seeding a database ------------------------------------------------------


def seed(latency_ms: int) -> None:
    """In a child process with DATABASE_URL set: migrate, then a member with a token, the
    chain graph and a recorded base run; prints ``{"token", "base"}``."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "forklab.settings"
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    from forklab.engine.graph import loads_graph
    from forklab.runs.models import Membership, Project, Role
    from forklab.runs.services import install_graph, record_run

    call_command("migrate", verbosity=0)
    project = Project.objects.create(slug="load", name="Load")
    user = get_user_model().objects.create_user("load")
    Membership.objects.create(user=user, project=project, role=Role.MEMBER)
    graph = loads_graph(CHAIN.replace("LATENCY", str(latency_ms)))
    install_graph(project=project, graph=graph)
    base = record_run(project=project, graph=graph, input={"topic": "a burst"}, user=user)
    print(json.dumps({"token": Token.objects.create(user=user).key, "base": base.id}))


# -- the parent side: servers, load, figures -------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Deployment:
    name: str
    env: dict[str, str]
    webs: int
    workers: int
    logs: Path
    worker_nice: int = 0
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)

    def start(self, web_env: dict[str, str] | None = None) -> None:
        for i in range(self.webs):
            port = free_port()
            self.ports.append(port)
            self._spawn(f"web-{i}", [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                                     "forklab.asgi:application"], web_env)
        nice = {"FORKLAB_WORKER_NICE": str(self.worker_nice)} if self.worker_nice else {}
        for i in range(self.workers):
            self._spawn(f"worker-{i}", [PYTHON, "manage.py", "db_worker", "--no-reload",
                                        "--interval", "0.05", "--no-startup-delay"], nice)

    def web_pids(self) -> list[int]:
        return [p.pid for p in self.processes[:self.webs]]

    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.processes[self.webs:]]

    def _spawn(self, name: str, argv: list[str], extra: dict[str, str] | None = None) -> None:
        log = (self.logs / f"{self.name}-{name}.log").open("wb")
        self.processes.append(subprocess.Popen(argv, cwd=ROOT, env={**self.env, **(extra or {})},
                                               stdout=log, stderr=subprocess.STDOUT))

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def wait_healthy(ports: list[int], deadline: float) -> None:
    import httpx

    async with httpx.AsyncClient() as client:
        for port in ports:
            while True:
                try:
                    if (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"daphne on port {port} did not come up")
                await asyncio.sleep(0.1)


@dataclass
class Fork:
    index: int
    accept_s: float = 0.0
    run_id: str = ""
    status_code: int = 0
    queue_position: int | None = None
    seen: list[int] = field(default_factory=list)
    final: str | None = None
    reconnects: int = 0
    log: list[int] = field(default_factory=list)


async def request_fork(port: int, token: str, base: str, fork: Fork,
                       start_gate: asyncio.Event) -> None:
    """One ``POST /api/v1/forks/``, timed from opening its connection to the whole answer.

    The request is plain HTTP/1.1 on an asyncio stream (:func:`post_json`), not httpx: the
    load client shares the two cores with the servers it measures, and httpx's per-request
    work (~2.5 to 4 ms of CPU here, 0.25 to 0.45 s for a burst of 100) was taken from them.
    """
    body = json.dumps({"base_run": base, "at": "start", "label": f"load {fork.index}",
                       "changes": [{"kind": "input_patch",
                                    "patch": {"topic": f"burst {fork.index}"}}]}).encode()
    await start_gate.wait()
    started = time.perf_counter()
    fork.status_code, answer = await asyncio.wait_for(
        post_json(port, "/api/v1/forks/", body, token), timeout=120)
    fork.accept_s = time.perf_counter() - started
    if fork.status_code == 202:
        data = json.loads(answer)
        fork.run_id, fork.queue_position = data["id"], data.get("queue_position")


async def post_json(port: int, path: str, body: bytes, token: str) -> tuple[int, bytes]:
    """POST ``body`` as JSON on a fresh connection (``Connection: close``); the status and the
    response body (``Content-Length`` or chunked, as daphne may send either)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     b"Authorization: Token %s\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                     % (path.encode(), port, token.encode(), len(body), body))
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (line.partition(":") for line in lines[1:] if line)}
        if "content-length" in headers:
            return status, await reader.readexactly(int(headers["content-length"]))
        if headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
            return status, b"".join(chunks)
        return status, await reader.read()
    finally:
        writer.close()


async def view(port: int, token: str, fork: Fork, deadline: float) -> None:
    """A script's websocket: token header, no Origin; every event until the final status.

    Like the dashboard's client, a viewer whose connection fails or drops reconnects with
    ``after=<last seq it received>`` (counted in ``reconnects``): nothing may be lost or
    repeated across it. It waits before reconnecting as the dashboard does
    (:func:`reconnect_delay`: capped exponential with full jitter, reset by a successful
    open), so failing viewers spread out instead of returning together every 0.2 s.
    """
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidHandshake, InvalidMessage, WebSocketException

    failures = 0
    while fork.final is None and time.monotonic() < deadline:
        after = fork.seen[-1] if fork.seen else 0
        url = f"ws://127.0.0.1:{port}/ws/runs/{fork.run_id}/?after={after}"
        try:
            async with connect(url, additional_headers={"Authorization": f"Token {token}"},
                               open_timeout=60, max_size=None) as ws:
                failures = 0  # opened: the next failure starts the back-off afresh
                while fork.final is None:
                    left = max(1.0, deadline - time.monotonic())
                    message = json.loads(await asyncio.wait_for(ws.recv(), timeout=left))
                    if message.get("type") != "stream.status":
                        fork.seen.append(message["seq"])
                    elif message["status"] in FINAL:
                        fork.final = message["status"]
        except (InvalidHandshake, InvalidMessage, WebSocketException, OSError):
            fork.reconnects += 1
            await asyncio.sleep(min(reconnect_delay(failures), max(0.0, deadline - time.monotonic())))
            failures += 1


def reconnect_delay(failures: int, base: float = 0.5, cap: float = 30.0) -> float:
    """Seconds to wait before reconnect number ``failures + 1`` since the last open: uniform
    in ``[0, min(cap, base * 2**failures)]`` ("full jitter") — the dashboard's policy
    (forklab/web/static/forklab.js)."""
    return random.uniform(0.0, min(cap, base * 2 ** min(failures, 16)))


async def read_log(client: Any, port: int, token: str, fork: Fork) -> None:
    """The fork's log as the API returns it (what its viewer must have received)."""
    for _ in range(5):
        response = await client.get(
            f"http://127.0.0.1:{port}/api/v1/runs/{fork.run_id}/events/?limit=5000",
            headers={"Authorization": f"Token {token}"})
        if response.status_code == 200:
            fork.log = [event["seq"] for event in response.json()["results"]]
            return
        await asyncio.sleep(0.5)
    raise SystemExit(f"reading the log of {fork.run_id}: {response.status_code} "
                     f"{response.text[:300]}")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time the processes used so far (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


async def burst(ports: list[int], web_pids: list[int], worker_pids: list[int], token: str,
                base: str, forks: int, viewers: int, deadline_s: float) -> dict[str, Any]:
    """All requests at once; then a viewer per accepted fork (from seq 0, so starting after
    the burst loses nothing) until every fork finished."""
    import httpx

    deadline = time.monotonic() + deadline_s
    items = [Fork(i) for i in range(forks)]
    gate = asyncio.Event()
    limits = httpx.Limits(max_connections=forks * 2, max_keepalive_connections=forks * 2)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        requests = [asyncio.create_task(request_fork(
            ports[f.index % len(ports)], token, base, f, gate)) for f in items]
        await asyncio.sleep(0.2)  # every request is parked at the gate: release them at once
        cpu_before, worker_before = cpu_seconds(web_pids), cpu_seconds(worker_pids)
        client_before = time.process_time()
        first = time.perf_counter()
        gate.set()
        await asyncio.gather(*requests)
        client_cpu = time.process_time() - client_before
        web_cpu = cpu_seconds(web_pids) - cpu_before
        worker_cpu = cpu_seconds(worker_pids) - worker_before
        await asyncio.gather(*(view(ports[f.index % len(ports)], token, f, deadline)
                               for f in items if f.run_id and f.index < viewers))
        drained = time.perf_counter() - first
        for fork in items:  # one at a time: the load is over, this is bookkeeping
            if fork.run_id:
                await read_log(client, ports[0], token, fork)
    result = figures(items, viewers, drained)
    result["web_cpu_ms_per_accept"] = round(web_cpu * 1000 / max(1, result["accepted"]), 1)
    result["worker_cpu_s_during_accepts"] = round(worker_cpu, 2) if worker_pids else None
    result["client_cpu_s_during_accepts"] = round(client_cpu, 2)
    return result


def figures(items: list[Fork], viewers: int, drained: float) -> dict[str, Any]:
    accepted = sorted(f.accept_s for f in items if f.status_code == 202)
    watched = [f for f in items if f.run_id and f.index < viewers]
    lost = sum(len(set(f.log) - set(f.seen)) for f in watched)
    duplicates = sum(len(f.seen) - len(set(f.seen)) for f in watched)
    finals: dict[str, int] = {}
    for fork in watched:
        finals[fork.final or "none"] = finals.get(fork.final or "none", 0) + 1
    p95 = accepted[max(0, round(0.95 * len(accepted)) - 1)] if accepted else float("nan")
    return {
        "requests": len(items), "accepted": len(accepted),
        "other_statuses": sorted({f.status_code for f in items if f.status_code != 202}),
        "accept_p50_ms": round(statistics.median(accepted) * 1000, 1) if accepted else None,
        "accept_p95_ms": round(p95 * 1000, 1), "accept_max_ms": round(accepted[-1] * 1000, 1)
        if accepted else None, "drain_s": round(drained, 2), "viewers": len(watched),
        "events_streamed": sum(len(f.seen) for f in watched), "events_lost": lost,
        "duplicates": duplicates, "final": finals,
        "reconnects": sum(f.reconnects for f in watched),
        "max_queue_position": max((f.queue_position or 0) for f in items),
    }


def run_deployment(name: str, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    base_env = {**os.environ, "PYTHONPATH": str(ROOT), "FORKLAB_LOG_LEVEL": "WARNING",
                "FORKLAB_SECRET_KEY": "bench-load", "FORKLAB_ALLOWED_HOSTS": "127.0.0.1"}
    scratch = None
    if name == "embedded":
        env = {**base_env, "DATABASE_URL": f"sqlite:///{logs / 'load.sqlite3'}"}
        webs, workers = 1, 0
    else:
        scratch = f"forklab_bench_load_{os.getpid()}"
        env = {**base_env, "DATABASE_URL": create_database(args.postgres, scratch),
               "REDIS_URL": args.redis, "FORKLAB_TASKS_BACKEND": "db"}
        webs, workers = 2, 2
    deployment = Deployment(name, env, webs, workers, logs, worker_nice=args.worker_nice)
    try:
        seeded = subprocess.run([PYTHON, __file__, "--seed", str(args.latency_ms)], cwd=ROOT,
                                env=env, capture_output=True, text=True, timeout=300)
        if seeded.returncode != 0:
            raise SystemExit(f"seeding failed: {seeded.stderr[-2000:]}")
        world = json.loads(seeded.stdout.strip().splitlines()[-1])
        deployment.start(dict(item.split("=", 1) for item in args.web_env))
        asyncio.run(wait_healthy(deployment.ports, time.monotonic() + 90))
        load = os.getloadavg()
        result = asyncio.run(burst(deployment.ports, deployment.web_pids(),
                                   deployment.worker_pids(), world["token"], world["base"],
                                   args.forks, args.viewers, args.deadline))
        return {"deployment": name, "web": webs, "workers": workers or "threads", **result,
                "load_average": [round(x, 1) for x in load]}
    finally:
        deployment.stop()
        if scratch:
            drop_database(args.postgres, scratch)


def create_database(server_url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server_url.rsplit("/", 1)[0] + f"/{name}"


def drop_database(server_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def print_table(results: list[dict[str, Any]]) -> None:
    header = ["deployment", "accepted", "p50 ms", "p95 ms", "max ms", "ratio",
              "web CPU ms/accept", "worker CPU s", "client CPU s", "drain s", "events", "lost", "dupes",
              "reconnects", "final", "max queue pos", "load avg"]
    rows = []
    for r in results:
        ratio = (f"{1000 / r['accept_p95_ms']:.2f}" if r["deployment"] == "scale"
                 and r["accept_p95_ms"] else "-")
        worker_cpu = r["worker_cpu_s_during_accepts"]
        rows.append([f"{r['deployment']} ({r['web']} web, {r['workers']} workers)",
                     f"{r['accepted']}/{r['requests']}", str(r["accept_p50_ms"]),
                     str(r["accept_p95_ms"]), str(r["accept_max_ms"]), ratio,
                     str(r["web_cpu_ms_per_accept"]), "-" if worker_cpu is None else str(worker_cpu),
                     str(r["client_cpu_s_during_accepts"]),
                     str(r["drain_s"]), str(r["events_streamed"]), str(r["events_lost"]),
                     str(r["duplicates"]), str(r["reconnects"]), json.dumps(r["final"]),
                     str(r["max_queue_position"]), " ".join(map(str, r["load_average"]))])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for line in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", nargs="+", choices=("embedded", "scale"),
                        default=["embedded", "scale"])
    parser.add_argument("--forks", type=int, default=100, help="concurrent fork requests")
    parser.add_argument("--viewers", type=int, default=100, help="websocket viewers (<= forks)")
    parser.add_argument("--latency-ms", type=int, default=50, help="per model call")
    parser.add_argument("--deadline", type=float, default=600, help="seconds per deployment")
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432/postgres",
                        help="PostgreSQL server URL (a scratch database is created on it)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--logs", help="keep the servers' logs in this directory")
    parser.add_argument("--web-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for the web processes only (repeatable)")
    parser.add_argument("--worker-nice", type=int, default=0, metavar="N",
                        help="FORKLAB_WORKER_NICE for the db_workers (scale)")
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seed is not None:
        seed(args.seed)
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="forklab-load-") as tmp:
        logs = Path(args.logs) if args.logs else Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        for name in args.mode:
            results.append(run_deployment(name, args, logs))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.forks} fork "
          f"requests at once, {args.viewers} viewers, 4 model calls of {args.latency_ms} ms "
          "per tail")
    print_table(results)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
