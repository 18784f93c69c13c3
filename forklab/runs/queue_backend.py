"""The scale-out task queue: django-tasks-db's ``DatabaseBackend``, its task row inserted with
SQL built once (``forklab.runs.inserts``) instead of ``DBTaskResult.objects.create``.

Every fork accept enqueues one task inside its transaction (``tasks.enqueue_fork``), and the
ORM's ``create`` — compiling the ``INSERT`` afresh, then the library building its
``TaskResult`` twice (the ``task_enqueued`` signal's and the caller's, each importing the task
by path) — was the largest single piece of an accept's CPU (~23 %, cProfile in process,
``bench/bench_accept.py``).

Invariants (``tests/scale/test_queue_backend.py``):

- the row stored is the row the library's ``enqueue`` stores: the same constructor values
  (its ``_task_to_db_task``), the model's field defaults and ``pre_save`` conversions, and
  the model's ``pre_save`` / ``post_save`` receivers run (django-tasks-db sets ``run_after``
  in one), so workers, ``get_result`` and the admin see no difference;
- ``task_enqueued`` is sent once per task, as the library sends it;
- an ``id_function`` that is a database expression (a database-generated id, which the
  plain insert cannot return) falls back to the library's own path.
"""

from __future__ import annotations

from typing import Any

from django.db import router
from django.db.models import Expression
from django.db.models.signals import post_save, pre_save
from django_tasks_db import DatabaseBackend as QueueBackend
from django_tasks_db.compat import normalize_json, task_enqueued
from django_tasks_db.models import DBTaskResult

from forklab.runs import inserts


class DatabaseBackend(QueueBackend):
    """django-tasks-db's database queue; ``enqueue`` inserts the task row without the ORM's
    per-row compiling and builds its result once."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        result_id = self._get_id()
        if isinstance(result_id, Expression):  # the database makes the id: the ORM's path
            return super().enqueue(task, args, kwargs)
        row: DBTaskResult[Any, Any] = DBTaskResult(id=result_id,
                           args_kwargs=normalize_json({"args": args, "kwargs": kwargs}),
                           priority=task.priority, task_path=task.module_path,
                           queue_name=task.queue_name, run_after=task.run_after,
                           backend_name=self.alias)
        using = router.db_for_write(DBTaskResult, instance=row)
        pre_save.send(sender=DBTaskResult, instance=row, raw=False, using=using,
                      update_fields=None)
        inserts.insert(row, using=using)
        post_save.send(sender=DBTaskResult, instance=row, created=True, update_fields=None,
                       raw=False, using=using)
        result = row.task_result
        task_enqueued.send(type(self), task_result=result)
        return result
