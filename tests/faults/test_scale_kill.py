"""Scale-out mode, for real: SIGKILL the ``db_worker`` executing a fork's tail.

Two ``manage.py db_worker`` children work the PostgreSQL test database's queue with short
leases and the slow counting provider (``tests/faults/world.py``); the websocket is this
process's consumer, woken over Redis. When the log shows the tail's second node started —
its model call in flight — the worker holding the run's lease (its pid is in the lease
owner) is SIGKILLed. The surviving worker's periodic sweep must take the run over once the
dead lease expires and finish it: within the stated bound, log contiguous, no model call
paid twice, the dead worker's queue task marked failed (not left ``RUNNING``), and the
websocket told the final status.

Runs in the scale-out session (``./dev test``: DATABASE_URL, REDIS_URL,
FORKLAB_TASKS_BACKEND=db).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from forklab.runs.forking import start_fork
from forklab.runs.models import Run
from forklab.runs.specs import ForkSpec
from tests.faults.world import (
    FORK,
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
from tests.scale.test_worker import SCALE, worker_database_url
from tests.ws.helpers import connect, token_header, until_status

pytestmark = [
    pytest.mark.scale, pytest.mark.slow,
    pytest.mark.skipif(not SCALE, reason="scale-out session only (./dev test runs it)"),
    pytest.mark.asyncio,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[dict[int, subprocess.Popen[bytes]]]:
    count_file = tmp_path / "paid-calls.txt"
    count_file.touch()
    env = child_env(count_file, DATABASE_URL=worker_database_url(),
                    FORKLAB_TASKS_BACKEND="db", REDIS_URL=settings.REDIS_URL)
    started_workers = {}
    for name in ("worker-a", "worker-b"):
        # the child writes through its own copy of the descriptor: ours closes at once
        with (tmp_path / f"{name}.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "manage.py", "db_worker", "--no-reload", "--interval", "0.1",
                 "--no-startup-delay", "--worker-id", name],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        started_workers[process.pid] = process
    yield started_workers
    for process in started_workers.values():
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    for log in sorted(tmp_path.glob("worker-*.log")):  # shown when the test fails
        print(f"--- {log.name} ---\n{log.read_text()[-3000:]}")


def holder_pid(run_id: str) -> int | None:
    """The pid of the process holding the run's lease (``host:pid:kind:random``)."""
    owner = Run.objects.filter(pk=run_id).values_list("lease_owner", flat=True).first() or ""
    parts = owner.split(":")
    return int(parts[1]) if len(parts) == 4 and parts[1].isdigit() else None


async def test_killing_the_worker_mid_tail_lets_the_survivor_finish_the_fork(
        tmp_path: Path, workers: dict[int, subprocess.Popen[bytes]]) -> None:
    from django_tasks_db.models import DBTaskResult

    token, base = await sync_to_async(seed)()
    member = await sync_to_async(lambda: Run.objects.get(pk=base).created_by)()
    run_id = await sync_to_async(lambda: start_fork(
        user=member, spec=ForkSpec.model_validate({"base_run": base, **FORK})).run.id)()
    ws = await connect(run_id, "", token_header(token))

    alive = lambda: all(p.poll() is None for p in workers.values())  # noqa: E731
    await sync_to_async(wait_for)("the tail's second node to start",
                                  lambda: started(run_id, "draft"), deadline_s=60,
                                  alive=alive)
    pid = await sync_to_async(holder_pid)(run_id)
    assert pid in workers, f"the lease is not held by a worker: {pid}"
    first_task = await sync_to_async(lambda: Run.objects.get(pk=run_id).task_id)()
    workers[pid].send_signal(signal.SIGKILL)  # mid-tail: draft's model call is in flight
    assert workers[pid].wait(timeout=30) == -signal.SIGKILL
    survivor = next(p for p in workers.values() if p.pid != pid)

    await sync_to_async(wait_for)("the fork to finish after the kill",
                                  lambda: finished(run_id), deadline_s=RECOVERY_BOUND_S,
                                  alive=lambda: survivor.poll() is None)
    events, status = await until_status(ws)
    await ws.disconnect()
    assert status == "completed"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))

    count_file = tmp_path / "paid-calls.txt"
    types = await sync_to_async(assert_recovered_intact)(run_id, count_file)
    assert "node.interrupted" in types
    assert paid_calls(count_file) == await sync_to_async(paid_in_logs)(run_id)
    dead = await sync_to_async(lambda: DBTaskResult.objects.get(pk=first_task))()
    assert dead.status == "FAILED" and "WorkerLost" in dead.exception_class_path
