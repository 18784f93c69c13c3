"""A ``django.tasks`` backend that runs tasks on a thread pool inside the server process.

The embedded default: no broker, no worker process. ``enqueue`` returns at once; the task
runs on one of ``MAX_WORKERS`` threads with its own database connection. ``drain`` waits
until every enqueued task has finished (tests and the CLI use it instead of sleeping).
Scale-out deployments use a real queue backend instead (see settings ``FORKLAB_TASKS``).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from django.db import close_old_connections, connections
from django.tasks.backends.immediate import ImmediateBackend
from django.tasks.base import Task, TaskResult

_lock = threading.Lock()
_pending: set[Future[None]] = set()


class ThreadPoolBackend(ImmediateBackend):
    supports_async_task = False
    supports_get_result = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        workers = int(params.get("OPTIONS", {}).get("MAX_WORKERS", 4))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="forklab-task")
        self._results: dict[str, TaskResult] = {}

    def _run(self, task_result: TaskResult) -> None:
        close_old_connections()
        try:
            self._execute_task(task_result)
        finally:
            connections.close_all()

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:  # type: ignore[override]
        self.validate_task(task)
        result = TaskResult(
            task=task, id=self._new_id(), status="READY", enqueued_at=None, started_at=None,
            last_attempted_at=None, finished_at=None, args=args, kwargs=kwargs,
            backend=self.alias, errors=[], worker_ids=[],
        )
        self._results[result.id] = result
        future = self._pool.submit(self._run, result)
        with _lock:
            _pending.add(future)
        future.add_done_callback(_forget)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        from django.tasks.exceptions import TaskResultDoesNotExist

        try:
            return self._results[result_id]
        except KeyError:
            raise TaskResultDoesNotExist(result_id) from None

    @staticmethod
    def _new_id() -> str:
        from django.utils.crypto import get_random_string

        return get_random_string(32)


def _forget(future: Future[None]) -> None:
    with _lock:
        _pending.discard(future)


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
