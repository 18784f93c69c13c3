"""Recovery: nothing stays ``running`` or ``queued`` after the process executing it died.

:func:`sweep` finds two kinds of abandoned runs and hands each to a ``recover_run`` task
(``forklab.runs.tasks``), which claims the run and drives it (resume from the log, or fail
``worker_lost`` — ``forklab.runs.execution``):

- **expired leases** — a queued, running or paused run whose holder stopped renewing its
  lease for ``FORKLAB_LEASE_TTL_S`` (killed process, lost host);
- **lost work** — a queued run (or a paused run with an answer waiting to be applied) that
  nobody holds and whose queue task is gone: the embedded thread pool died with its process,
  or a queue worker died between taking the task and claiming the run.

The hand-over is a compare-and-set of the lease to a one-time token, so two sweeps (two web
processes, several workers) never recover one run twice; the token itself expires, so a
recovery task that is lost in turn is swept again. A stale queue task of the dead worker is
marked failed in the queue (``task_backends.abandon``) so the queue does not show it running.

:class:`Supervisor` runs a sweep at start-up and every ``FORKLAB_RECOVERY_SWEEP_S``, in every
web process (``forklab.asgi``) and every ``db_worker``; it also enqueues the mapping of OTLP traces
left on the receiver's backlog (``forklab.runs.traces.sweep_backlog``).
"""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connections
from django.utils import timezone

from forklab.runs import leases, task_backends
from forklab.runs.models import Run, RunStatus

log = logging.getLogger("forklab.runs.recovery")


def sweep(*, now: datetime | None = None) -> list[str]:
    """Hand every abandoned run to a recovery task; the ids handed over (in this sweep)."""
    now = now or timezone.now()
    handed = []
    expired = (Run.objects.filter(status__in=leases.ACTIVE, lease_expires_at__lt=now)
               .exclude(lease_owner="").values_list("id", "lease_owner", "task_id"))
    for run_id, owner, task_id in expired:
        if _hand_over(run_id, owner, now):
            task_backends.abandon(task_id, f"its worker's lease on run {run_id} expired")
            handed.append(run_id)
    for run_id, task_id in _waiting(now):
        if not task_backends.alive(task_id, now=now) and _hand_over(run_id, "", now):
            task_backends.abandon(task_id, f"run {run_id} was waiting for it past its lease TTL")
            handed.append(run_id)
    if handed:
        log.warning("recovering %d abandoned run(s): %s", len(handed), ", ".join(handed))
    return handed


def _waiting(now: datetime) -> list[tuple[str, str]]:
    """Runs nobody holds that wait for queued work: queued, or paused with an answer to
    apply; only those older than one TTL (a task may be on its way to the queue)."""
    free = Run.objects.filter(lease_owner="", created_at__lt=now - leases.ttl())
    queued = list(free.filter(status=RunStatus.QUEUED).order_by("created_at")  # FIFO
                  .values_list("id", "task_id"))
    paused = free.filter(status=RunStatus.PAUSED, work__task="answer")
    answered = [(run_id, task_id) for run_id, task_id, work, last_seq
                in paused.values_list("id", "task_id", "work", "last_seq")
                if (work or {}).get("at_seq") == last_seq]
    return queued + answered


def _hand_over(run_id: str, owner: str, now: datetime) -> bool:
    from forklab.runs import tasks

    token = f"recovery:{uuid.uuid4().hex}"
    if not leases.hand_over(run_id, expected_owner=owner, token=token, now=now):
        return False  # another sweep (or the run's own task) got there first
    try:
        tasks.enqueue_recovery(run_id, token)
    except Exception:  # the token expires and the next sweep tries again
        log.exception("could not enqueue the recovery of run %s", run_id)
        return False
    return True


class Supervisor:
    """One daemon thread per process: a sweep now, then every FORKLAB_RECOVERY_SWEEP_S."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.stop = threading.Event()

    def start(self) -> bool:
        """Start sweeping (once per process); False when sweeping is off (interval 0)."""
        if not settings.FORKLAB_RECOVERY_SWEEP_S:
            return False
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="forklab-recovery",
                                                daemon=True)
                self._thread.start()
        return True

    def _loop(self) -> None:
        while True:
            try:
                close_old_connections()
                sweep()
                # traces stored by a process that died before mapping them (docs/traces.md)
                from forklab.runs.traces import sweep_backlog

                sweep_backlog()
            except DatabaseError as exc:  # not migrated yet, or the database is away
                log.warning("recovery sweep failed: %s", exc)
            except Exception:  # a failed sweep is retried at the next interval
                log.warning("recovery sweep failed", exc_info=True)
            finally:
                connections.close_all()
            if self.stop.wait(settings.FORKLAB_RECOVERY_SWEEP_S):
                return


supervisor = Supervisor()
