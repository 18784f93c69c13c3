"""Background work through Django's tasks API: fork tails, answers, sweeps, recordings,
recoveries.

Task arguments are JSON (the queue may be another process). Every task claims the lease of
the run it is about (``forklab.runs.leases``: a compare-and-set, so two workers handed one
run never both execute it) and then drives it from what the database says
(``forklab.runs.execution.drive``): the request was validated before it was enqueued, but the
world may have moved (the run was cancelled, or another worker already took it). A task
never raises for a user error: the outcome is recorded on the run instead.

Each enqueue records the queue's task id on the run row, so a recovery sweep can tell a run
whose task is still waiting in the queue from one whose task was lost with its process.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.tasks import task, task_backends
from pydantic import JsonValue

from forklab.engine.errors import ForklabError
from forklab.runs import execution, leases
from forklab.runs.models import Run, RunStatus
from forklab.runs.projections import ForkResultProjection
from forklab.runs.specs import SweepSpec
from forklab.runs.store import DjangoStore

log = logging.getLogger("forklab.runs.tasks")


def claim_and_drive(run_id: str, *, token: str | None = None) -> str:
    """Claim the run's lease (or return ``skipped``), drive it, release the lease."""
    owner = leases.new_owner()
    if not leases.claim(run_id, owner=owner, token=token):
        return "skipped: the run is finished or another worker holds it"
    try:
        return execution.drive(run_id, owner=owner)
    finally:
        leases.release(owner)
        after_work([run_id])


def after_work(run_ids: Sequence[str]) -> None:
    """Once a worker has let go of runs (lease released: nobody waits on it): cancel each
    paused one whose cancel came while the worker still held it, continue each paused one
    whose answer came then (its ``continue_fork`` found the lease taken), and store the
    result of each finished fork among them, so reading it reads no log."""
    for run_id in run_ids:
        if not execution.cancel_if_requested(run_id):
            answer = execution.unapplied_answer(run_id)
            if answer is not None:
                enqueue_answer(run_id, answer)
        ForkResultProjection.after_run(run_id, DjangoStore)


@task
def execute_fork(run_id: str, spec: dict[str, JsonValue] | None = None) -> str:
    """Start a queued fork. Its validated request is on the row (``Run.work``); ``spec`` is
    ignored (tasks enqueued by older versions carry a copy of it here)."""
    return claim_and_drive(run_id)


@task
def continue_fork(run_id: str, answer: dict[str, Any] | None = None) -> str:
    """Apply the answer stored for the gate a paused run waits at, and run on.

    ``answer`` is kept on the row already (``control.answer``); a task enqueued by an older
    version carries it only here, so it is stored first when the gate has none.
    """
    if answer:
        _store_answer(run_id, answer)
    return claim_and_drive(run_id)


def _store_answer(run_id: str, answer: dict[str, Any]) -> None:
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        work = (run.work or {}) if run is not None else {}
        if run is None or run.status != RunStatus.PAUSED or (
                work.get("task") == "answer" and work.get("at_seq") == run.last_seq):
            return
        run.work = {"task": "answer", "at_seq": run.last_seq, "answer": answer}
        run.save(update_fields=["work"])


@task
def execute_recording(run_id: str, *args: Any) -> str:
    """Record a queued primary run (its graph version and input are on the row)."""
    return claim_and_drive(run_id)


@task
def recover_run(run_id: str, token: str) -> str:
    """Take over a run whose executor died (a sweep handed it over under ``token``)."""
    owner = leases.new_owner("recovery")
    if not leases.claim(run_id, owner=owner, token=token):
        return "skipped: another worker took it over"
    try:
        if _recovered_too_often(run_id):
            run = Run.objects.select_related("project").get(pk=run_id)
            execution.fail(run, DjangoStore(run.project, lease=owner),
                           execution.WORKER_LOST, f"its worker was lost {execution.MAX_RECOVERIES}"
                           " times; it is not resumed again")
            return RunStatus.FAILED
        log.info("recovering run %s", run_id)
        return execution.drive(run_id, owner=owner)
    finally:
        leases.release(owner)
        after_work([run_id])


def _recovered_too_often(run_id: str) -> bool:
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        work = dict(run.work or {})
        recoveries = int(work.get("recoveries", 0)) + 1
        work["recoveries"] = recoveries
        run.work = work
        run.save(update_fields=["work"])
    return recoveries > execution.MAX_RECOVERIES


@task
def execute_sweep(group: str, spec: dict[str, JsonValue], run_ids: dict[str, str]) -> str:
    """Run a sweep's variants together (one shared memo); each variant is leased, so a
    variant whose worker dies is recovered on its own like any fork. ``spec`` is the
    validated SweepSpec's JSON form (task arguments cross the queue as JSON)."""
    from forklab.engine.fork.sweep import run_sweep
    from forklab.runs.planning import planned_sweep, stored_inputs

    sweep = SweepSpec.model_validate(spec)
    base = Run.objects.select_related("project").get(pk=sweep.base_run)
    owner = leases.new_owner("sweep")
    live = {n: i for n, i in run_ids.items() if leases.claim(i, owner=owner)}
    works = dict(Run.objects.filter(pk__in=list(live.values())).values_list("id", "work"))
    try:
        # the plans the request made, rebuilt (one prefix fold per effective point)
        planned = planned_sweep(sweep, base, {n: stored_inputs(works.get(i))
                                              for n, i in live.items()})
        result = run_sweep(
            planned, concurrency=sweep.concurrency, ignore_budget=sweep.ignore_budget,
            fork_group_id=group, store=DjangoStore(base.project, lease=owner),
            on_event=lambda _name, event: execution.on_event(event), run_ids=live)
        for variant in result.results.values():  # after_work stores them, reading no log
            ForkResultProjection.hold(variant)
        for name, error in result.errors.items():
            run = Run.objects.select_related("project").get(pk=live[name])
            execution.fail(run, DjangoStore(run.project, lease=owner),
                           str(error.get("code") or "variant_failed"),
                           str(error.get("detail", "")))
    except ForklabError as exc:
        for run_id in live.values():
            run = Run.objects.select_related("project").get(pk=run_id)
            execution.fail(run, DjangoStore(run.project, lease=owner), exc.code,
                           exc.message)
        return f"failed: {exc.code}"
    finally:
        leases.release(owner)
        after_work(list(live.values()))
    return f"{len(result.results)} ok, {len(result.errors)} failed"


# -- enqueueing ----------------------------------------------------------------------------


def _enqueued(run_ids: list[str], result: Any) -> None:
    Run.objects.filter(pk__in=run_ids).update(task_id=str(result.id))


def enqueue_fork(run_id: str, spec: dict[str, JsonValue]) -> str | None:
    """Enqueue a queued fork's tail; called inside the transaction that creates its row.

    When the task backend makes it atomic, the task is enqueued at once, as part of that
    transaction, and its id is returned for the row to carry: the database queue
    (django-tasks-db in the runs' database) commits the task row with the run row or not at
    all — no worker sees a task whose run is not there yet, and no crash between two commits
    loses the task — and the embedded thread pool starts a task only once the enqueueing
    transaction commits. That spares an accept the task-id ``UPDATE`` and two commits.
    Any other backend is handed the task when the transaction commits (None: the id is
    recorded on the row then). ``spec`` (``ForkSpec.wire()``, the JSON a queue carries) is on the
    row already (``Run.work``).
    """
    if joins_transactions(task_backends[execute_fork.backend]):
        return str(execute_fork.enqueue(run_id).id)
    transaction.on_commit(lambda: _enqueued([run_id], execute_fork.enqueue(run_id)))
    return None


def joins_transactions(backend: Any) -> bool:
    """True when ``backend.enqueue`` inside a transaction takes effect only if it commits."""
    from django.apps import apps
    from django.db import router

    from forklab.runs.task_backends import ThreadPoolBackend

    if isinstance(backend, ThreadPoolBackend):
        return True
    if not apps.is_installed("django_tasks_db"):
        return False
    from django_tasks_db import DatabaseBackend
    from django_tasks_db.models import DBTaskResult

    return isinstance(backend, DatabaseBackend) and bool(
        router.db_for_write(DBTaskResult) == router.db_for_write(Run))


def enqueue_answer(run_id: str, answer: dict[str, Any]) -> None:
    _enqueued([run_id], continue_fork.enqueue(run_id))


def enqueue_sweep(group: str, spec: SweepSpec, run_ids: dict[str, str]) -> None:
    _enqueued(list(run_ids.values()), execute_sweep.enqueue(group, spec.wire(), run_ids))


def enqueue_recording(run_id: str, *args: Any) -> None:
    _enqueued([run_id], execute_recording.enqueue(run_id))


def enqueue_recovery(run_id: str, token: str) -> None:
    _enqueued([run_id], recover_run.enqueue(run_id, token))

