"""Steering a run that exists: cancel it, answer the gate it paused at.

Both are compare-and-set on the run row (locked in one transaction), so concurrent requests
resolve to one outcome:

- **cancel** marks the run; when nothing executes it — it never started, it is paused, or
  its executor's lease expired — the cancellation is recorded at once (``cancelled``), else
  the holder stops at its next node or call boundary;
- **answer** stores the answer for the gate at the current seq and enqueues the task that
  applies it; a second answer to the same gate is ``already_answered`` (409), whoever sent it.
  An answer whose memory updates set a key the gate does not declare is refused first
  (``invalid_overrides``, nothing stored).
"""

from __future__ import annotations

from django.db import transaction

from forklab.engine.answers import check_answer
from forklab.engine.errors import RunStateError
from forklab.runs import execution, queries, tasks
from forklab.runs.access import User, require_role
from forklab.runs.errors import AlreadyAnswered
from forklab.runs.models import Role, Run, RunStatus
from forklab.runs.specs import AnswerSpec


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
        if not execution.held_live(run):
            execution.cancel_now(run)
        # no runner may be executing it to send wake-ups: tell open streams the run moved on
        # (``run.last_seq`` is the row as locked, before a cancellation was appended)
        execution.notify_when_committed(run.id)
    run.refresh_from_db()
    return run


def answer(*, user: User, run_id: str, spec: AnswerSpec) -> Run:
    """Answer the approval gate a paused run waits at; the run continues in the background.

    Compare-and-set: the first answer to a gate is stored (``Run.work``) and enqueued, any
    later one is ``already_answered``.
    """
    run = queries.get_run(run_id, user=user)
    require_answerer(user, run)
    run = store_answer(run.pk, spec, answered_by=getattr(user, "username", "") or "api")
    stored = dict((run.work or {})["answer"])
    transaction.on_commit(lambda: tasks.enqueue_answer(run_id, stored))
    return run


def require_answerer(user: User, run: Run) -> None:
    """``permission_denied`` unless ``user`` may answer ``run``'s gates (a member): every
    surface checks it first, before it reads the answer's fields."""
    require_role(user, run.project, Role.MEMBER, action="answering an approval gate")


def store_answer(run_id: str, spec: AnswerSpec, *, answered_by: str) -> Run:
    """Store ``spec`` as the answer to the gate run ``run_id`` waits at (its row locked):
    ``already_answered`` for a gate answered before, ``invalid_run_state`` for a run not
    paused, ``invalid_overrides`` for undeclared keys — nothing stored. The caller applies
    it (a queued ``continue_fork``, or the CLI inline); roles are the caller's to check."""
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("project").get(pk=run_id)
        work = run.work or {}
        if work.get("task") == "answer" and work.get("at_seq") == run.last_seq:
            raise AlreadyAnswered(
                f"the gate run {run_id!r} waits at (seq {run.last_seq}) was already answered "
                f"({work['answer'].get('decision')}); it continues with that answer",
                run_id=run_id, decision=work["answer"].get("decision"))
        if run.status != RunStatus.PAUSED:
            raise RunStateError(f"run {run_id!r} is {run.status}, not paused at an approval "
                                "gate", run_id=run_id, status=run.status)
        gate = queries.waiting_gate(run)
        if gate is not None:  # refused before it is stored; the runner checks it again
            check_answer(gate, spec.memory_updates)
        run.work = {"task": "answer", "at_seq": run.last_seq,
                    "answer": {**spec.model_dump(mode="json"), "answered_by": answered_by}}
        run.save(update_fields=["work"])
    return run
