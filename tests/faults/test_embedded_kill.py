"""Embedded mode, for real: SIGKILL the one daphne process while a fork's tail runs in it.

A daphne child serves the test's SQLite database (committed data: ``transactional_db``) with
short leases and the slow counting provider (``tests/faults/world.py``). A fork is started
over HTTP, a second one waits queued behind it (one task thread), and a websocket (token
only, no ``Origin``) watches the first. When the log shows the tail's second node started —
its model call in flight — daphne is SIGKILLed. A new daphne on the same database must then,
by itself (its start-up and periodic recovery sweeps): resume the running fork from its log,
redo the queued fork its predecessor lost, and let a reconnecting websocket see the final
status; within the stated bound (``world.RECOVERY_BOUND_S``), logs contiguous, no model call
paid twice.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.faults.world import (
    FORK,
    OTHER,
    RECOVERY_BOUND_S,
    ROOT,
    assert_recovered_intact,
    child_env,
    finished,
    paid_calls,
    paid_in_logs,
    seed,
    started,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Daphne:
    """One daphne child process serving the test database."""

    def __init__(self, tmp_path: Path, count_file: Path, name: str) -> None:
        self.port = free_port()
        self.log_path = tmp_path / f"{name}.log"
        env = child_env(count_file, DATABASE_URL=f"sqlite:///{connection.settings_dict['NAME']}",
                        FORKLAB_TASK_WORKERS="1", FORKLAB_METRICS_ALLOW="*")
        # the child writes through its own copy of the descriptor: ours closes at once
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
                 "forklab.asgi:application"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        wait_for(f"{name} to serve /healthz", self.healthy, deadline_s=60, alive=self.alive)

    def alive(self) -> bool:
        return self.process.poll() is None

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        assert self.process.wait(timeout=30) == -signal.SIGKILL

    def stop(self) -> None:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        print(f"--- {self.log_path.name} ---\n{self.log_path.read_text()[-3000:]}")


class Watcher(threading.Thread):
    """A script's websocket on a run: token header, no Origin; collects every message until
    a final status, or until the server goes away."""

    FINAL = ("completed", "failed", "blocked", "cancelled")

    def __init__(self, url: str, token: str, after: int = 0) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.after = url, token, after
        self.messages: list[dict[str, Any]] = []
        self.final: str | None = None
        self.connected = threading.Event()

    def run(self) -> None:
        try:
            with connect(f"{self.url}?after={self.after}", open_timeout=30,
                         additional_headers={"Authorization": f"Token {self.token}"}) as ws:
                self.connected.set()
                for raw in ws:
                    message = json.loads(raw)
                    self.messages.append(message)
                    if message["type"] == "stream.status" and message["status"] in self.FINAL:
                        self.final = message["status"]
                        return
        except (ConnectionClosed, OSError):
            return  # the server was killed

    def last_seq(self) -> int:
        return max((m["seq"] for m in self.messages if "seq" in m), default=self.after)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Daphne]]:
    started_servers: list[Daphne] = []
    yield started_servers
    for server in started_servers:
        server.stop()


def test_killing_daphne_mid_tail_resumes_the_fork_and_redoes_the_queued_one(
        tmp_path: Path, servers: list[Daphne]) -> None:
    token, base = seed()
    count_file = tmp_path / "paid-calls.txt"
    count_file.touch()
    first = Daphne(tmp_path, count_file, "daphne-1")
    servers.append(first)
    api = {"Authorization": f"Token {token}"}
    running = httpx.post(f"{first.url}/api/v1/forks/", json={"base_run": base, **FORK},
                         headers=api, timeout=30).json()["id"]
    queued = httpx.post(f"{first.url}/api/v1/forks/",
                        json={"base_run": base, **OTHER, "label": "behind"},
                        headers=api, timeout=30).json()
    assert queued["state"] == "queued" and queued["queue_position"] in (1, 2)
    ws_url = f"ws://127.0.0.1:{first.port}/ws/runs/{running}/"
    watcher = Watcher(ws_url, token)
    watcher.start()
    assert watcher.connected.wait(30), "a token-only websocket without Origin was refused"

    wait_for("the tail's second node to start", lambda: started(running, "draft"),
             deadline_s=60, alive=first.alive)
    first.kill()  # mid-tail: draft's model call is in flight
    watcher.join(timeout=30)
    assert watcher.final is None  # the stream died with its server

    second = Daphne(tmp_path, count_file, "daphne-2")
    servers.append(second)
    again = Watcher(f"ws://127.0.0.1:{second.port}/ws/runs/{running}/", token,
                    after=watcher.last_seq())
    again.start()
    for run_id in (running, queued["id"]):
        wait_for(f"run {run_id} to finish after the kill", lambda r=run_id: finished(r),
                 deadline_s=RECOVERY_BOUND_S, alive=second.alive)
    again.join(timeout=60)
    assert again.final == "completed"
    seen = [m["seq"] for m in watcher.messages + again.messages if "seq" in m]
    assert seen == list(range(1, len(seen) + 1))  # across the reconnect: no gap, no repeat

    types = assert_recovered_intact(running, count_file)
    assert "node.interrupted" in types  # draft was cut short and re-executed
    assert assert_recovered_intact(queued["id"], count_file)[-1] == "run.completed"
    assert paid_calls(count_file) == paid_in_logs(running, queued["id"])
