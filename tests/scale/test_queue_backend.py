"""The scale-out queue backend (``forklab.runs.queue_backend``) stores the task row
django-tasks-db's own ``enqueue`` stores, without the ORM's per-row ``INSERT`` compiling.

Scale-out session only (django-tasks-db installed and chosen: ``FORKLAB_TASKS_BACKEND=db``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.tasks import task_backends
from django.tasks.signals import task_enqueued
from django.utils import timezone

from forklab.runs import tasks

QUEUE = "forklab.runs.queue_backend.DatabaseBackend"

pytestmark = [
    pytest.mark.scale,
    pytest.mark.skipif(settings.TASKS["default"]["BACKEND"] != QUEUE,
                       reason="scale-out session only: FORKLAB_TASKS_BACKEND=db"),
    pytest.mark.django_db,
]

#: what differs between two enqueues of the same task by design
OWN = ("id", "enqueued_at")


def stored(result: Any) -> dict[str, Any]:
    from django_tasks_db.models import DBTaskResult

    row = DBTaskResult.objects.get(pk=result.id)
    return {f.attname: getattr(row, f.attname) for f in DBTaskResult._meta.concrete_fields
            if f.attname not in OWN}


def library_enqueue(task: Any, *args: Any) -> Any:
    from django_tasks_db import DatabaseBackend

    backend = task_backends[task.backend]
    return DatabaseBackend.enqueue(backend, task, list(args), {})


VARIANTS: dict[str, Callable[[], dict[str, Any]]] = {
    "plain": dict,
    "priority": lambda: {"priority": 7, "queue_name": "default"},
    "run_after": lambda: {"run_after": timezone.now() + timedelta(minutes=5)},
}


@pytest.mark.parametrize("variant", VARIANTS)  # made in the test: only this backend takes them
def test_the_task_row_is_the_row_the_library_stores(variant: str) -> None:
    task = tasks.execute_fork.using(**VARIANTS[variant]())
    ours = task.enqueue("run-1", {"base_run": "b"})
    theirs = library_enqueue(task, "run-1", {"base_run": "b"})
    assert stored(ours) == stored(theirs)
    assert ours.id != theirs.id
    assert (ours.status, ours.args, ours.kwargs, ours.backend) == (
        theirs.status, theirs.args, theirs.kwargs, theirs.backend)
    assert task_backends["default"].get_result(ours.id).status == ours.status


def test_a_task_without_run_after_is_stored_runnable_as_the_librarys_receiver_sets_it() -> None:
    from django_tasks_db.models import DBTaskResult, get_date_max

    result = tasks.execute_fork.enqueue("run-2")
    assert DBTaskResult.objects.get(pk=result.id).run_after == get_date_max()
    assert DBTaskResult.objects.ready().filter(pk=result.id).exists()


def test_each_enqueue_announces_its_task_once() -> None:
    heard: list[Any] = []

    def listen(sender: Any, task_result: Any, **kwargs: Any) -> None:
        heard.append(task_result.id)

    task_enqueued.connect(listen)
    try:
        result = tasks.execute_fork.enqueue("run-3")
    finally:
        task_enqueued.disconnect(listen)
    assert heard == [result.id]


def test_the_fork_accept_enqueues_inside_its_transaction() -> None:
    assert tasks.joins_transactions(task_backends["default"])
