"""Scale-out mode (SPEC §5): a fork's tail runs in a separate queue-worker process.

PostgreSQL (``DATABASE_URL``), the Redis channel layer (``REDIS_URL``) and the database task
queue (``FORKLAB_TASKS_BACKEND=db``, django-tasks-db) are chosen by settings, so these tests
run in their own pytest session with that environment (``./dev test`` starts it after the
main one; see docs/deployment.md). The worker is a real ``forklab worker`` (``db_worker``) subprocess
pointed at pytest-django's test database through ``DATABASE_URL``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.tasks import task_backends

from forklab.runs import tasks
from forklab.runs.forking import start_fork
from forklab.runs.models import Event, Run
from forklab.runs.specs import ForkSpec
from tests.ws.conftest import World
from tests.ws.helpers import connect, seqs, token_header, until_status

DB_BACKEND = "forklab.runs.queue_backend.DatabaseBackend"
SCALE = (settings.TASKS["default"]["BACKEND"] == DB_BACKEND
         and settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
         and bool(settings.REDIS_URL))

pytestmark = [
    pytest.mark.scale,
    pytest.mark.skipif(not SCALE, reason="scale-out session only: DATABASE_URL=postgres://…, "
                       "REDIS_URL=redis://…, FORKLAB_TASKS_BACKEND=db (./dev test runs it)"),
    pytest.mark.asyncio,
    pytest.mark.django_db(transaction=True),
]
ROOT = Path(__file__).resolve().parents[2]
WORKER_ID = "scale-test-worker"


def worker_database_url() -> str:
    """pytest-django's test database (the name it switched to), as a URL for the worker."""
    db = connection.settings_dict
    auth = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return (f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/"
            f"{quote(db['NAME'])}")


@pytest.fixture
def worker_env() -> dict[str, str]:
    """Extra environment for the worker process (a test overrides it)."""
    return {}


@pytest.fixture
def worker(world: World, tmp_path: Path,
           worker_env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "DATABASE_URL": worker_database_url(), "FORKLAB_TASKS_BACKEND": "db",
           "REDIS_URL": settings.REDIS_URL, **worker_env}
    log = (tmp_path / "worker.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "forklab", "worker", "--no-reload", "--interval", "0.1",
         "--no-startup-delay", "--worker-id", WORKER_ID],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    yield process
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.close()
    print((tmp_path / "worker.log").read_text()[-4000:])  # shown when the test fails


@sync_to_async
def queued_fork(world: World) -> str:
    return start_fork(user=world.member, spec=ForkSpec(
        base_run=world.base.id, at="start", label="on the worker",
        changes=[{"kind": "prompt", "target": "draft", "system_prompt": "A haiku."}])).run.id


@sync_to_async
def outcome(run_id: str) -> dict[str, Any]:
    from django_tasks_db.models import DBTaskResult

    [result] = DBTaskResult.objects.filter(args_kwargs__args__0=run_id)
    return {"status": Run.objects.get(pk=run_id).status,
            "seqs": list(Event.objects.filter(run_id=run_id).order_by("seq")
                         .values_list("seq", flat=True)),
            "task_status": result.status, "worker_ids": result.worker_ids,
            "task": result.task_path}


def task_finished(run_id: str, deadline_s: float = 60.0) -> None:
    from django_tasks_db.models import DBTaskResult

    deadline = time.monotonic() + deadline_s
    while DBTaskResult.objects.filter(args_kwargs__args__0=run_id, status="RUNNING").exists():
        assert time.monotonic() < deadline, "the worker never finished the task"
        time.sleep(0.05)


async def test_the_worker_process_runs_the_tail_and_wakes_the_stream_over_redis(
        world: World, worker: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from channels.layers import get_channel_layer
    from channels_redis.core import RedisChannelLayer
    from django_tasks_db import DatabaseBackend

    assert isinstance(task_backends["default"], DatabaseBackend)  # no thread pool here
    assert isinstance(get_channel_layer(), RedisChannelLayer)
    held: dict[str, Any] = {}
    monkeypatch.setattr(tasks, "enqueue_fork", lambda run_id, spec: held.update(
        enqueue=lambda: tasks.execute_fork.enqueue(run_id, spec)))

    run_id = await queued_fork(world)
    ws = await connect(run_id, "", token_header(world.token))  # nothing in the log yet
    await sync_to_async(held["enqueue"])()  # onto the database queue, for the worker
    events, status = await until_status(ws)  # wake-ups only: polling is off (wakeups_only)
    await ws.disconnect()

    # the task is marked successful a moment after the run's last event (it releases the
    # run's lease first): wait for the queue row, with a deadline
    await sync_to_async(task_finished)(run_id)
    done = await outcome(run_id)
    assert worker.poll() is None, "the worker died"
    assert status == done["status"] == "completed"
    assert seqs(events) == done["seqs"] == list(range(1, len(events) + 1))
    assert done["task"] == "forklab.runs.tasks.execute_fork"
    assert (done["task_status"], done["worker_ids"]) == ("SUCCESSFUL", [WORKER_ID])


def finished(run_id: str, deadline_s: float = 60.0) -> dict[str, Any]:
    """``outcome`` once the worker took the task and marked it done."""
    deadline = time.monotonic() + deadline_s
    while (done := outcome.func(run_id))["task_status"] not in ("SUCCESSFUL", "FAILED"):
        assert time.monotonic() < deadline, f"the worker never finished the task: {done}"
        time.sleep(0.05)
    return done


def niceness(pid: int) -> int:
    """A process's nice value (Linux /proc: field 19 of stat)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


@pytest.mark.parametrize("worker_env", [{"FORKLAB_WORKER_NICE": "7"}])
async def test_a_worker_with_a_nice_setting_runs_tails_at_lower_cpu_priority(
        world: World, worker: subprocess.Popen[bytes]) -> None:
    run_id = await queued_fork(world)  # its task row commits with it: the worker takes it
    done = await sync_to_async(finished)(run_id)
    assert (done["status"], done["task_status"]) == ("completed", "SUCCESSFUL")
    assert worker.poll() is None, "the worker died"
    assert niceness(worker.pid) == niceness(os.getpid()) + 7
