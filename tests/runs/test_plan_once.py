"""A fork is planned once: the request path resolves, validates and estimates it and stores
the plan's inputs on the row; the worker rebuilds the plan from them, so across accept and
worker the base is loaded (folded) once and ``prepare_fork`` runs once."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection

from forklab.engine.environment import Environment
from forklab.engine.reducers import fold
from forklab.runs import bases, planning, tasks
from forklab.runs.forking import start_fork
from forklab.runs.models import Run
from forklab.runs.specs import ForkSpec
from forklab.runs.store import DjangoStore
from tests.runs.recovery_world import CHANGE, World

pytestmark = pytest.mark.django_db(transaction=True)


def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    calls: Counter[str] = Counter()
    for module, name in ((planning, "prepare_fork"), (bases, "load_base")):
        real = getattr(module, name)

        def count(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, count)
    return calls


def accept(world: World, monkeypatch: pytest.MonkeyPatch, label: str,
           at: object = "start") -> str:
    monkeypatch.setattr(tasks, "enqueue_fork", lambda run_id, spec: None)
    spec = ForkSpec.model_validate({"base_run": world.base.id, "at": at,
                                    "changes": CHANGE, "label": label})
    return start_fork(user=world.member, spec=spec).run.id


def test_accept_and_worker_plan_a_fork_once_and_fold_its_base_once(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    bases.forget()
    calls = counted(monkeypatch)
    run_id = accept(world, monkeypatch, "once")
    work = Run.objects.get(pk=run_id).work
    assert work is not None and work["plan"]["effective"]["seq"] >= 1
    assert tasks.claim_and_drive(run_id) == "completed"
    assert calls == Counter({"prepare_fork": 1, "load_base": 1})


@pytest.mark.parametrize("at", ["start", {"before_node": "announce"}],
                         ids=["at-start", "point-moved-back"])
def test_the_rebuilt_plan_runs_the_fork_the_planned_one_runs(
        world: World, monkeypatch: pytest.MonkeyPatch, at: object) -> None:
    """A row without stored inputs (queued before they were) is planned again; both
    forks open with the same ``run.forked`` and end in the same state — also when the
    input patch moved the point back (``vote`` read the patched key before ``announce``)."""
    rebuilt = accept(world, monkeypatch, "same", at)
    replanned = accept(world, monkeypatch, "same", at)
    row = Run.objects.get(pk=replanned)
    assert row.work is not None
    row.work = {k: v for k, v in row.work.items() if k != "plan"}
    row.save(update_fields=["work"])
    calls = counted(monkeypatch)
    assert tasks.claim_and_drive(replanned) == "completed"
    assert calls["prepare_fork"] == 1  # the fallback plans again
    assert tasks.claim_and_drive(rebuilt) == "completed"
    assert calls["prepare_fork"] == 1  # the stored inputs do not
    store = DjangoStore(world.project)
    events = {r: store.read(r) for r in (rebuilt, replanned)}
    forked = {r: next(e for e in ev if e.type == "run.forked").payload()
              for r, ev in events.items()}
    moved = at != "start"
    assert bool(forked[rebuilt]["estimate"]["point_notes"]) is moved
    assert forked[rebuilt] == forked[replanned]
    states = {r: fold(ev) for r, ev in events.items()}
    assert states[rebuilt].memory == states[replanned].memory
    assert [e.type for e in events[rebuilt]] == [e.type for e in events[replanned]]


class WatchedGate:
    """A lock that counts the threads that reached it (holding or waiting)."""

    def __init__(self, arrived: threading.Semaphore) -> None:
        self._lock, self._arrived = threading.Lock(), arrived

    def __enter__(self) -> None:
        self._arrived.release()
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()


def test_a_burst_of_requests_for_one_base_loads_it_once(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    bases.forget()
    requests, arrived, loading = 6, threading.Semaphore(0), threading.Event()
    real, loads = bases.load_base, []

    def slow_load(*args: Any, **kwargs: Any) -> Any:
        loads.append(1)
        assert loading.wait(30), "the other requests never reached the base's gate"
        return real(*args, **kwargs)

    monkeypatch.setattr(bases, "load_base", slow_load)
    monkeypatch.setattr(bases, "_new_gate", lambda: WatchedGate(arrived))
    run, env = Run.objects.get(pk=world.base.id), Environment()
    got: list[Any] = []

    def request() -> None:
        try:
            got.append(bases.loaded(run, env))
        finally:
            connection.close()  # this thread's own

    threads = [threading.Thread(target=request) for _ in range(requests)]
    for thread in threads:
        thread.start()
    for _ in range(requests):  # every request is at the gate: one loading, the rest waiting
        assert arrived.acquire(timeout=30)
    loading.set()
    for thread in threads:
        thread.join(30)
    assert len(loads) == 1 and len(got) == requests
    assert len({id(base.events) for base in got}) == 1  # all share the one loaded base
