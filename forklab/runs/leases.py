"""Execution leases: at most one process executes a run at a time, and a dead one is noticed.

A process that executes a run (a fork tail, a recording, an answered gate, a recovery)
first **claims** the run's lease: one compare-and-set ``UPDATE`` of the run row that succeeds
only when nobody holds a live lease (or the caller presents the hand-over ``token`` a
recovery sweep left). Two workers handed the same run therefore never both execute it. The
holder keeps the lease alive with a **heartbeat** (one process-wide thread renewing every
lease the process holds every ``FORKLAB_HEARTBEAT_S``), and every append it makes is
**fenced**: ``DjangoStore(lease=owner)`` refuses to append when the row's owner is no longer
the caller (``lease_lost``), so a process that lost its lease — paused too long, partitioned
— cannot write behind the new holder's back.

A killed process stops renewing; ``FORKLAB_LEASE_TTL_S`` later its leases are expired and
``forklab.runs.recovery`` takes the runs over. Runs a holder creates itself (a CLI recording,
a subgraph child) are created under its owner, so they are renewed and recovered alike.

Owners are unique per claim (``host:pid:kind:random``), never reused: a lease is a fencing
token, not a process identity.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections, connections
from django.db.models import Q
from django.utils import timezone

from forklab.runs.models import Run, RunStatus

log = logging.getLogger("forklab.runs.leases")

#: statuses in which a run can hold a lease (a paused run holds one only while an answer
#: to its gate is being applied)
ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.PAUSED)


def ttl() -> timedelta:
    return timedelta(seconds=settings.FORKLAB_LEASE_TTL_S)


def new_owner(kind: str = "task") -> str:
    """A fresh lease owner: ``host:pid:kind:random``."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{kind}:{uuid.uuid4().hex[:16]}"


def claim(run_id: str, *, owner: str, token: str | None = None,
          now: datetime | None = None) -> bool:
    """Take the run's lease for ``owner``: True when this call got it.

    Succeeds only while the run is active (queued, running, paused) and its lease is free,
    expired, or held under ``token`` (a hand-over a recovery sweep or an answer left).
    """
    now = now or timezone.now()
    free = Q(lease_owner="") | Q(lease_expires_at__lt=now)
    if token:
        free |= Q(lease_owner=token)
    taken = Run.objects.filter(free, pk=run_id, status__in=ACTIVE).update(
        lease_owner=owner, lease_expires_at=now + ttl(), heartbeat_at=now)
    if taken:
        keeper.hold(owner)
    return bool(taken)


def hand_over(run_id: str, *, expected_owner: str, token: str,
              now: datetime | None = None) -> bool:
    """Compare-and-set the lease from ``expected_owner`` to ``token`` (kept for one TTL, so
    a hand-over whose task is lost expires again); True when this call did it."""
    now = now or timezone.now()
    return bool(Run.objects.filter(pk=run_id, lease_owner=expected_owner,
                                   status__in=ACTIVE).update(
        lease_owner=token, lease_expires_at=now + ttl(), heartbeat_at=now))


def renew(owners: set[str], *, now: datetime | None = None) -> int:
    """Extend every lease held by ``owners``; the number of runs renewed."""
    now = now or timezone.now()
    return Run.objects.filter(lease_owner__in=owners).update(
        lease_expires_at=now + ttl(), heartbeat_at=now)


def release(owner: str) -> None:
    """Give up every lease ``owner`` holds.

    A run that came to rest (finished, paused) is left free. One still queued or running —
    its executor stopped early without finishing it — is left *expired* under the owner, so
    the next recovery sweep resumes it instead of it staying ``running`` forever.
    """
    keeper.drop(owner)
    now = timezone.now()
    held = Run.objects.filter(lease_owner=owner)
    held.filter(status__in=(RunStatus.QUEUED, RunStatus.RUNNING)).update(lease_expires_at=now)
    held.exclude(status__in=(RunStatus.QUEUED, RunStatus.RUNNING)).update(
        lease_owner="", lease_expires_at=None)


@contextmanager
def held(owner: str) -> Iterator[str]:
    """Heartbeat ``owner``'s leases for the duration; release them afterwards.

    For an executor that creates its runs itself (a CLI recording or fork): pass ``owner``
    to ``DjangoStore(lease=owner)`` and the rows it creates carry the lease.
    """
    keeper.hold(owner)
    try:
        yield owner
    finally:
        release(owner)


class Keeper:
    """The process's heartbeat: one daemon thread renewing the leases of held owners."""

    def __init__(self) -> None:
        self._owners: set[str] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def hold(self, owner: str) -> None:
        with self._lock:
            self._owners.add(owner)
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._beat, name="forklab-heartbeat",
                                                daemon=True)
                self._thread.start()

    def drop(self, owner: str) -> None:
        with self._lock:
            self._owners.discard(owner)

    def owners(self) -> set[str]:
        with self._lock:
            return set(self._owners)

    def _beat(self) -> None:
        stop = threading.Event()
        while not stop.wait(settings.FORKLAB_HEARTBEAT_S):
            owners = self.owners()
            if not owners:
                continue
            try:
                close_old_connections()
                renew(owners)
            except Exception:  # a missed beat is retried; the lease TTL covers several
                log.warning("lease heartbeat failed", exc_info=True)
            finally:
                connections.close_all()


keeper = Keeper()
