"""Driving one run to its next resting point, under its lease: the body of every task.

Every background task — a fork tail, a recording, an answer, a recovery — does the same
thing: claim the run's lease (``forklab.runs.leases``), then :func:`drive` it. ``drive``
reads what the run needs from the row and its log, so a task handed a run in any state does
the right thing:

- finished: nothing;
- cancel requested: finish it ``cancelled`` (nobody else is executing it: we hold the lease);
- nothing recorded yet: start the work stored on the row (``Run.work``: a fork request, a
  recording);
- paused: apply the answer stored for *this* gate (``work.at_seq == last_seq``), if any;
- running (its executor died): resume from the log — a fork with its fork oracle
  (``fork_runner``), a primary run with the live oracle; the node that was cut short is
  re-executed and whatever it had recorded is served back (``reused``), so no recorded call
  is paid twice. A subgraph child is not resumed (its parent re-executes the subgraph node);
  it fails ``worker_lost``.

Whatever goes wrong is recorded, never left ``running``: a user error (``ForklabError``)
fails the run with its code (``not_run`` when nothing was recorded), a bug fails it
``internal_error``. Only ``lease_lost`` stops silently: another process owns the run now.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from forklab.engine.errors import ForklabError
from forklab.engine.events import Event, RunCancelled, RunFailed
from forklab.engine.oracle import HumanAnswer
from forklab.engine.reducers import fold
from forklab.engine.runner import CancelToken, Runner
from forklab.engine.state import FINISHED_STATUSES
from forklab.runs import broadcast
from forklab.runs.engine_env import build_environment
from forklab.runs.errors import LeaseLost
from forklab.runs.models import Run, RunKind, RunStatus
from forklab.runs.planning import planned, stored_inputs
from forklab.runs.store import DjangoStore

log = logging.getLogger("forklab.runs.execution")

WORKER_LOST = "worker_lost"
#: a run whose executor died this many times is failed instead of resumed again (a run that
#: kills its worker — out of memory, a crashing tool — must not take the next one down too)
MAX_RECOVERIES = 3


class DbCancelToken(CancelToken):
    """Cancelled when the run row says so (works across processes and workers).

    The runner asks before every node and every outside call; the row is read at most once
    per ``interval`` seconds (a 1,000-node chain at 0 ms asked 2,000 times), so a
    cancellation is seen within ``interval`` plus the current call — and once seen it
    sticks (the token never un-cancels)."""

    interval = 0.25

    def __init__(self, run_ids: list[str]) -> None:
        super().__init__()
        self.run_ids = run_ids
        self._checked_at = float("-inf")

    @property
    def cancelled(self) -> bool:
        if super().cancelled:
            return True
        now = time.monotonic()
        if now - self._checked_at < self.interval:
            return False
        self._checked_at = now
        if Run.objects.filter(pk__in=self.run_ids, cancel_requested=True).exists():
            self.cancel()
            return True
        return False


def on_event(event: Event) -> None:
    broadcast.notify(event.run_id, event.seq)


def drive(run_id: str, *, owner: str) -> str:
    """Take the run (whose lease ``owner`` holds) to its next resting point; its status.

    Never raises for what happens to the run: the outcome is on the run.
    """
    run = Run.objects.select_related("project").filter(pk=run_id).first()
    if run is None:
        return "gone"
    store = DjangoStore(run.project, lease=owner)
    try:
        return _step(run, store)
    except LeaseLost:
        log.warning("run %s: lease lost to another worker; stopped", run_id)
        return "lease_lost"
    except ForklabError as exc:
        fail(run, store, exc.code, exc.message)
    except Exception as exc:  # a bug: record it, never leave the run running
        log.exception("run %s: unexpected error while executing it", run_id)
        fail(run, store, "internal_error", f"{type(exc).__name__}: {exc}")
    row = Run.objects.filter(pk=run_id).values("status", "error").first()
    if row is None:
        return "gone"
    return "not_run" if (row["error"] or {}).get("not_run") else str(row["status"])


def _step(run: Run, store: DjangoStore) -> str:
    if run.finished:
        return str(run.status)
    if run.cancel_requested:
        finish_cancelled(run, store, "cancelled by request")
        return RunStatus.CANCELLED
    if run.last_seq == 0:
        return _start(run, store)
    if run.status == RunStatus.PAUSED:
        return _answer(run, store)
    return _resume(run, store)


def _runner_kwargs(run: Run) -> dict[str, Any]:
    return {"env": build_environment(), "on_event": on_event,
            "cancel": DbCancelToken([run.id])}


def _start(run: Run, store: DjangoStore) -> str:
    work = run.work or {}
    if work.get("task") == "fork":
        from forklab.engine.fork.core import run_plan
        from forklab.engine.fork.result import result_of
        from forklab.runs.projections import ForkResultProjection
        from forklab.runs.specs import ForkSpec

        spec = ForkSpec.model_validate(work["spec"])
        base = Run.objects.select_related("project").filter(pk=spec.base_run).first()
        plan = planned(spec, run.project, base, stored_inputs(work))
        kwargs = _runner_kwargs(run)
        del kwargs["env"]
        runner = run_plan(plan, run_id=run.id, label=spec.label, store=store,
                          ignore_budget=spec.ignore_budget,
                          fork_group_id=run.fork_group_id, **kwargs)
        # the result in hand, for after_work to store without reading both logs again
        ForkResultProjection.hold(result_of(plan, runner.state, run_id=run.id,
                                            label=spec.label, fork_group_id=run.fork_group_id))
        return runner.state.status
    if work.get("task") == "record":
        graph = store.load_graph(work["graph_id"], work["version"])
        runner = Runner(graph, store=store, run_id=run.id, graph_version=work["version"],
                        **_runner_kwargs(run))
        return runner.start(work["input"], label=work.get("label", "")).status
    fail(run, store, WORKER_LOST, "the run's request was lost with its worker and it never "
         "started; start it again")
    return RunStatus.FAILED


def _answer(run: Run, store: DjangoStore) -> str:
    work = run.work or {}
    if work.get("task") != "answer" or work.get("at_seq") != run.last_seq:
        return RunStatus.PAUSED  # nothing to apply: it waits for a person
    answer = work["answer"]
    runner = _runner_for(run, store)
    state = runner.answer(HumanAnswer(
        decision=answer["decision"], data=answer.get("data"),
        memory_updates=answer.get("memory_updates") or {}, label="live",
        answered_by=answer.get("answered_by", "")))
    return state.status


def _resume(run: Run, store: DjangoStore) -> str:
    if run.run_kind == RunKind.SUBGRAPH:
        fail(run, store, WORKER_LOST, "the worker executing this subgraph run was lost; its "
             "parent run re-executes the subgraph node when it is resumed")
        return RunStatus.FAILED
    try:
        runner = _runner_for(run, store)
    except LeaseLost:
        raise
    except ForklabError as exc:
        fail(run, store, WORKER_LOST, f"its worker was lost and it cannot be resumed: "
             f"{exc.code}: {exc.message}")
        return RunStatus.FAILED
    return runner.resume().status


def _runner_for(run: Run, store: DjangoStore) -> Runner:
    """A runner continuing ``run`` from its log: a fork with its fork oracle (changes,
    policy, budget, memoization from its ``run.forked``), any other run with the live one."""
    kwargs = _runner_kwargs(run)
    if run.run_kind == RunKind.COUNTERFACTUAL:
        from forklab.engine.fork.core import fork_runner

        return fork_runner(run.id, store=store, **kwargs)
    state = fold(store.read(run.id))
    graph = store.load_graph(state.graph_id, state.graph_version)
    runner = Runner(graph, store=store, run_id=run.id, graph_version=state.graph_version,
                    **kwargs)
    runner.state = state
    return runner


# -- recording an outcome without a runner -----------------------------------------------------


def fail(run: Run, store: DjangoStore, code: str, message: str) -> None:
    """Finish ``run`` failed with ``code``: ``not_run`` when it recorded nothing, else a
    ``run.failed`` event; never raises (a row update is the last resort)."""
    _finish(run, store, lambda seq, at: RunFailed(
        run_id=run.id, seq=seq, at=at, error={"code": code, "message": message}),
            status=RunStatus.FAILED, error={"code": code, "message": message, "not_run": True})


def finish_cancelled(run: Run, store: DjangoStore, reason: str) -> None:
    _finish(run, store, lambda seq, at: RunCancelled(run_id=run.id, seq=seq, at=at,
                                                     reason=reason),
            status=RunStatus.CANCELLED, error={"code": "cancelled", "message": reason})


def _finish(run: Run, store: DjangoStore, make: Callable[[int, float], Event], *, status: RunStatus,
            error: dict[str, Any]) -> None:
    try:
        with transaction.atomic():
            row = Run.objects.select_for_update().get(pk=run.pk)
            if row.finished:
                return
            if row.last_seq == 0:
                row.status, row.error = status, error
                row.save(update_fields=["status", "error"])
            else:
                at = round(build_environment().clock(), 6)
                store.append(run.id, [make(row.last_seq + 1, at)], expected_seq=row.last_seq)
    except LeaseLost:
        return  # the new holder decides
    except Exception:
        log.exception("run %s: could not record its outcome %s in the log; marking the row",
                      run.id, status)
        Run.objects.filter(pk=run.pk).exclude(status__in=FINISHED_STATUSES).update(
            status=status, error=error)
    notify_when_committed(run.id)


def notify_when_committed(run_id: str) -> None:
    """Wake the run's streams once the current transaction commits (at once outside one),
    naming the last seq committed then.

    Not before: a stream woken inside the transaction reads the log before the new events
    are visible, and then takes a later wake-up naming an older seq as stale
    (``RunTail.stale``) — it would not hear of the change until its next poll (a cancelled
    paused fork looked paused on every open page for up to ``FORKLAB_STREAM_POLL_S``).
    """
    transaction.on_commit(lambda: broadcast.notify(run_id, Run.objects.filter(
        pk=run_id).values_list("last_seq", flat=True).first() or 0))


def cancel_if_requested(run_id: str) -> bool:
    """Cancel a paused run whose cancel arrived while its executor was stopping at the gate.

    ``cancel`` leaves the stop to a live lease holder; an executor that has just paused the
    run holds the lease until it lets go, and will not look at the flag again. So once it
    let go (``tasks.after_work``) this finishes what the cancel asked. Both take the row
    lock: a cancel after this check finds the lease free and cancels at once itself.
    """
    with transaction.atomic():
        run = (Run.objects.select_for_update().select_related("project")
               .filter(pk=run_id).first())
        if (run is None or run.status != RunStatus.PAUSED or not run.cancel_requested
                or held_live(run)):
            return False
        cancel_now(run)
        notify_when_committed(run.id)
    return True


def unapplied_answer(run_id: str) -> dict[str, Any] | None:
    """The answer stored for the gate a paused run waits at, when nobody holds the run to
    apply it; else None.

    ``control.answer`` stores the answer and enqueues ``continue_fork``; when the answer
    arrives while the executor that paused the run still holds its lease, that task finds
    the lease taken and is skipped, and the executor, already past its gate, will not look
    at the row again. So once it let go (``tasks.after_work``) this says the answer is still
    waiting, to be enqueued again. A second enqueue is harmless: whichever task claims the
    lease first applies the answer, the other finds the run running or finished.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status != RunStatus.PAUSED or held_live(run):
            return None
        work = run.work or {}
        if work.get("task") != "answer" or work.get("at_seq") != run.last_seq:
            return None
        answer: dict[str, Any] = work["answer"]
        return answer


def held_live(run: Run) -> bool:
    """True while a live lease holder is (about to be) executing the run: it sees the flag
    at its next boundary. A run nobody holds — never started, paused, or whose executor's
    lease expired — has nobody to see it."""
    return bool(run.lease_owner and run.lease_expires_at
                and run.lease_expires_at > timezone.now())


def cancel_now(run: Run) -> None:
    """Record the cancellation (the row is locked; no live holder can append meanwhile)."""
    reason = ("cancelled before it started" if run.last_seq == 0 else
              "cancelled while paused" if run.status == RunStatus.PAUSED else
              "cancelled after its worker was lost")
    finish_cancelled(run, DjangoStore(run.project), reason)
    Run.objects.filter(pk=run.pk).update(lease_owner="", lease_expires_at=None)
