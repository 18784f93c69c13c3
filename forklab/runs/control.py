"""Steering a run that exists: cancel it, answer the gate it paused at.

Both are compare-and-set on the run row (locked in one transaction), so concurrent requests
resolve to one outcome:

- **cancel** marks the run; when nothing executes it — it never started, it is paused, or
  its executor's lease expired — the cancellation is recorded at once (``cancelled``), else
  the holder stops at its next node or call boundary;
- **answer** stores the answer for the gate at the current seq and enqueues the task that
  applies it; a second answer to the same gate is ``already_answered`` (409), whoever sent it.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from forklab.engine.errors import RunStateError
from forklab.runs import queries, tasks
from forklab.runs.access import User, require_role
from forklab.runs.errors import AlreadyAnswered
from forklab.runs.models import Role, Run, RunStatus
from forklab.runs.specs import AnswerSpec
from forklab.runs.store import DjangoStore


def cancel(*, user: User, run_id: str) -> Run:
    """Ask a queued, running or paused run to stop; one nobody executes stops now."""
    run = queries.get_run(run_id, user=user)
    require_role(user, run.project, Role.MEMBER, action="cancelling a run")
    if run.finished:
        return run
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("project").get(pk=run.pk)
        if run.finished:
            return run
        run.cancel_requested = True
        run.save(update_fields=["cancel_requested"])
        if not _executed_now(run):
            _cancel_now(run)
        from forklab.runs import execution

        # no runner may be executing it to send wake-ups: tell open streams the run moved on
        # (``run.last_seq`` is the row as locked, before a cancellation was appended)
        execution.notify_when_committed(run.id)
    run.refresh_from_db()
    return run


def cancel_if_requested(run_id: str) -> bool:
    """Cancel a paused run whose cancel arrived while its executor was stopping at the gate.

    ``cancel`` leaves the stop to a live lease holder; an executor that has just paused the
    run holds the lease until it lets go, and will not look at the flag again. So once it
    let go (``tasks.after_work``) this finishes what the cancel asked. Both take the row
    lock: a cancel after this check finds the lease free and cancels at once itself.
    """
    from forklab.runs import execution

    with transaction.atomic():
        run = (Run.objects.select_for_update().select_related("project")
               .filter(pk=run_id).first())
        if (run is None or run.status != RunStatus.PAUSED or not run.cancel_requested
                or _executed_now(run)):
            return False
        _cancel_now(run)
        execution.notify_when_committed(run.id)
    return True


def _executed_now(run: Run) -> bool:
    """True while a live lease holder is (about to be) executing the run: it sees the flag
    at its next boundary. A run nobody holds — never started, paused, or whose executor's
    lease expired — has nobody to see it."""
    return bool(run.lease_owner and run.lease_expires_at
                and run.lease_expires_at > timezone.now())


def _cancel_now(run: Run) -> None:
    """Record the cancellation (the row is locked; no live holder can append meanwhile)."""
    from forklab.runs import execution

    reason = ("cancelled before it started" if run.last_seq == 0 else
              "cancelled while paused" if run.status == RunStatus.PAUSED else
              "cancelled after its worker was lost")
    execution.finish_cancelled(run, DjangoStore(run.project), reason)
    Run.objects.filter(pk=run.pk).update(lease_owner="", lease_expires_at=None)


def answer(*, user: User, run_id: str, spec: AnswerSpec) -> Run:
    """Answer the approval gate a paused run waits at; the run continues in the background.

    Compare-and-set: the first answer to a gate is stored (``Run.work``) and enqueued, any
    later one is ``already_answered``.
    """
    run = queries.get_run(run_id, user=user)
    require_role(user, run.project, Role.MEMBER, action="answering an approval gate")
    answered_by = getattr(user, "username", "") or "api"
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("project").get(pk=run.pk)
        work = run.work or {}
        if work.get("task") == "answer" and work.get("at_seq") == run.last_seq:
            raise AlreadyAnswered(
                f"the gate run {run_id!r} waits at (seq {run.last_seq}) was already answered "
                f"({work['answer'].get('decision')}); it continues with that answer",
                run_id=run_id, decision=work["answer"].get("decision"))
        if run.status != RunStatus.PAUSED:
            raise RunStateError(f"run {run_id!r} is {run.status}, not paused at an approval "
                                "gate", run_id=run_id, status=run.status)
        run.work = {"task": "answer", "at_seq": run.last_seq,
                    "answer": {**spec.model_dump(mode="json"), "answered_by": answered_by}}
        run.save(update_fields=["work"])
        stored = dict(run.work["answer"])
        transaction.on_commit(lambda: tasks.enqueue_answer(run_id, stored))
    return run
