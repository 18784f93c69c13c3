"""A ``django.tasks`` backend that runs tasks on a thread pool inside the server process, and
what recovery needs to know about any backend's tasks.

The embedded default: no broker, no worker process. ``enqueue`` returns at once; the task
starts when the enqueueing transaction commits (at once outside one) and runs on one of
``MAX_WORKERS`` threads (``FORKLAB_TASK_WORKERS``) with its own database
connection. There is **one pool per process**, whatever the number of backend instances
(Django builds one per thread that asks for it): that pool is the back-pressure — work beyond
its size waits, visibly ``queued``. ``drain`` waits until every enqueued task has finished
(tests and the CLI use it instead of sleeping). Scale-out deployments use a real queue
backend instead (see settings ``FORKLAB_TASKS``).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from django.db import close_old_connections, connections, transaction
from django.tasks import task_backends
from django.tasks.backends.immediate import ImmediateBackend
from django.tasks.base import Task, TaskResult, TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist

log = logging.getLogger("forklab.runs.task_backends")
P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.Lock()
_pending: set[Future[None]] = set()
_pool: ThreadPoolExecutor | None = None
_results: dict[str, TaskResult[..., Any]] = {}


def pool(workers: int) -> ThreadPoolExecutor:
    """The process's one task pool (its size is fixed by the first caller)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="forklab-task")
        return _pool


class ThreadPoolBackend(ImmediateBackend):
    supports_async_task = False
    supports_get_result = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.workers = int(params.get("OPTIONS", {}).get("MAX_WORKERS", 4))

    def _run(self, task_result: TaskResult[..., Any]) -> None:
        close_old_connections()
        try:
            # ImmediateBackend's runner: django-stubs omit this private method
            self._execute_task(task_result)  # type: ignore[attr-defined]
        finally:
            connections.close_all()

    def enqueue(self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
                ) -> TaskResult[P, R]:
        self.validate_task(task)
        result = TaskResult(
            task=task, id=self._new_id(), status=TaskResultStatus.READY, enqueued_at=None,
            started_at=None, last_attempted_at=None, finished_at=None, args=args,
            kwargs=kwargs, backend=self.alias, errors=[], worker_ids=[],
        )
        # Started once the enqueueing transaction commits (at once outside one): a task
        # enqueued with the row it is about never runs before that row exists, nor at all
        # when it rolls back (``tasks.enqueue_fork`` relies on it).
        transaction.on_commit(lambda: self._submit(result))
        return result

    def _submit(self, result: TaskResult[..., Any]) -> None:
        with _lock:
            _results[result.id] = result
        future = pool(self.workers).submit(self._run, result)
        with _lock:
            _pending.add(future)
        future.add_done_callback(_forget(result.id))

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        with _lock:
            try:
                return _results[result_id]
            except KeyError:
                raise TaskResultDoesNotExist(result_id) from None

    @staticmethod
    def _new_id() -> str:
        from django.utils.crypto import get_random_string

        return get_random_string(32)


def _forget(result_id: str) -> Any:
    def done(future: Future[None]) -> None:
        with _lock:
            _pending.discard(future)
            _results.pop(result_id, None)  # a finished task is "gone": only waiting ones count

    return done


def drain(timeout: float = 60.0) -> bool:
    """Wait until no task is pending or running (tasks may enqueue more); True if idle."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        with _lock:
            pending = set(_pending)
        if not pending:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        wait(pending, timeout=remaining)


# -- what recovery asks of any backend -------------------------------------------------------


def alive(task_id: str, *, now: datetime) -> bool:
    """True while the queue still holds task ``task_id`` as waiting, or running since less
    than one lease TTL (a worker that took it and died before claiming its run leaves it
    ``RUNNING`` forever)."""
    from forklab.runs.leases import ttl

    if not task_id:
        return False
    try:
        result = task_backends["default"].get_result(task_id)
    except (TaskResultDoesNotExist, NotImplementedError, ValueError):
        return False
    if result.status == TaskResultStatus.READY:
        return True
    if result.status == TaskResultStatus.RUNNING:
        started = result.started_at
        return started is None or started > now - ttl()
    return False


def abandon(task_id: str, reason: str) -> None:
    """Mark a task the queue still shows running as failed (its worker is gone).

    Only the database queue (django-tasks-db) keeps such rows; other backends have nothing
    to mark. Never raises.
    """
    from django.apps import apps

    if not task_id or not apps.is_installed("django_tasks_db"):
        return
    from django_tasks_db.models import DBTaskResult

    try:
        row = DBTaskResult.objects.filter(pk=task_id, status=TaskResultStatus.RUNNING).first()
        if row is not None:
            row.set_failed(WorkerLost(reason))
    except Exception:
        log.warning("could not mark task %s failed", task_id, exc_info=True)


class WorkerLost(Exception):
    """Recorded on a queue task whose worker died while it ran (recovery took its run over)."""
