"""Leases and recovery: nothing stays running or queued after its executor died.

Executors here "die" in-process (``recovery_world.Killed`` right after a committed event,
heartbeat dropped); ``tests/faults/`` kills real daphne and ``db_worker`` processes. Each test
states one guarantee of ``forklab.runs.leases`` / ``recovery`` / ``execution``.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import IntegrityError

from forklab.engine.reducers import fold
from forklab.runs import execution, leases, recovery, tasks
from forklab.runs.control import answer, cancel
from forklab.runs.errors import LeaseLost
from forklab.runs.forking import start_fork
from forklab.runs.models import Event, Run
from forklab.runs.readmodel import fork_result, queue_position
from forklab.runs.specs import AnswerSpec, ForkSpec
from forklab.runs.store import DjangoStore
from forklab.runs.task_backends import drain
from tests.runs.recovery_world import (
    CHANGE,
    World,
    age,
    die_at,
    execute_and_die,
    expire,
)

pytestmark = pytest.mark.django_db(transaction=True)


def queued_fork(world: World, monkeypatch: pytest.MonkeyPatch, **spec: object) -> str:
    """A fork accepted while its queue task is held back (as if lost)."""
    monkeypatch.setattr(tasks, "enqueue_fork", lambda run_id, spec: None)
    body = {"base_run": world.base.id, "at": "start", "changes": CHANGE, **spec}
    run_id = start_fork(user=world.member, spec=ForkSpec.model_validate(body)).run.id
    return run_id


def gated_base(world: World) -> Run:
    """A recorded order-fulfilment run: a fork of it at start pauses at its approval gate."""
    from forklab.engine.scenarios import SCENARIOS
    from forklab.runs.services import install_graph, record_run

    scenario = SCENARIOS["order-fulfilment"]
    graph = scenario.graph()
    install_graph(project=world.project, graph=graph)
    return record_run(project=world.project, graph=graph, input=scenario.input,
                      human_decision="approved")


def paused_fork(world: World) -> str:
    """A fork of :func:`gated_base` at start, run until it paused at the gate."""
    base = gated_base(world)
    run_id = start_fork(user=world.member, spec=ForkSpec(base_run=base.id, at="start")).run.id
    assert drain(timeout=60)
    assert Run.objects.get(pk=run_id).status == "paused"
    return run_id


def types(run_id: str) -> list[str]:
    return list(Event.objects.filter(run_id=run_id).order_by("seq")
                .values_list("type", flat=True))


def assert_contiguous(run_id: str) -> None:
    seqs = list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq",
                                                                                flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    run = Run.objects.get(pk=run_id)
    assert run.last_seq == len(seqs)
    assert fold(DjangoStore(run.project).read(run_id)).status == run.status


def uninterrupted_calls(world: World, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """What an uninterrupted fork with the same change pays, call by call."""
    run_id = queued_fork(world, monkeypatch, label="reference")
    world.provider.paid.clear()
    assert tasks.claim_and_drive(run_id) == "completed"
    paid = Counter(world.provider.paid)
    world.provider.paid.clear()
    return paid


def test_a_fork_whose_executor_died_mid_node_is_resumed_and_pays_no_call_twice(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = uninterrupted_calls(world, monkeypatch)
    run_id = queued_fork(world, monkeypatch)
    die_at(monkeypatch, "agent.responded", nth=2)  # inside the panel node: 2 of 4 calls paid
    execute_and_die(run_id)
    assert Run.objects.get(pk=run_id).status == "running"
    assert recovery.sweep() == []  # the lease has not expired yet: nobody takes it over

    expire(run_id)
    assert recovery.sweep() == [run_id]
    assert drain(timeout=60)

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.lease_owner) == ("completed", "")
    assert_contiguous(run_id)
    assert "node.interrupted" in types(run_id)
    assert world.provider.paid == reference  # each call paid exactly once, killed attempt incl.
    result = fork_result(run)
    assert result is not None
    labels = [c.label for c in result.calls if c.node == "vote"]
    assert labels.count("reused") == 2


def test_a_fork_whose_executor_died_between_nodes_resumes_at_the_next_node(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = uninterrupted_calls(world, monkeypatch)
    run_id = queued_fork(world, monkeypatch)
    die_at(monkeypatch, "node.completed", nth=1)
    execute_and_die(run_id)
    expire(run_id)
    assert recovery.sweep() == [run_id]
    assert drain(timeout=60)
    assert Run.objects.get(pk=run_id).status == "completed"
    assert "node.interrupted" not in types(run_id)
    assert_contiguous(run_id)
    assert world.provider.paid == reference


def test_queued_work_lost_with_its_process_is_started_by_a_sweep(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = queued_fork(world, monkeypatch)
    assert queue_position(Run.objects.get(pk=run_id)) == 1
    assert recovery.sweep() == []  # younger than one TTL: its task may be on its way
    age(run_id)
    assert recovery.sweep() == [run_id]
    assert recovery.sweep() == []  # handed over once: a second sweep finds nothing to do
    assert drain(timeout=60)
    assert Run.objects.get(pk=run_id).status == "completed"
    assert_contiguous(run_id)


def test_a_queued_run_whose_task_still_waits_in_the_queue_is_left_alone(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = queued_fork(world, monkeypatch)
    age(run_id)
    monkeypatch.setattr("forklab.runs.task_backends.alive", lambda task_id, now: True)
    assert recovery.sweep() == []
    assert Run.objects.get(pk=run_id).status == "queued"


def test_an_answer_whose_task_was_lost_is_applied_by_a_sweep(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = paused_fork(world)
    monkeypatch.setattr(tasks, "enqueue_answer", lambda run_id, answer: None)  # lost
    answer(user=world.member, run_id=run_id, spec=AnswerSpec(decision="approved"))
    age(run_id)
    assert recovery.sweep() == [run_id]
    assert drain(timeout=60)
    assert Run.objects.get(pk=run_id).status == "completed"
    assert "human.answered" in types(run_id)


def test_a_second_answer_to_one_gate_is_already_answered(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from forklab.runs.errors import AlreadyAnswered

    run_id = paused_fork(world)
    monkeypatch.setattr(tasks, "enqueue_answer", lambda run_id, answer: None)
    answer(user=world.member, run_id=run_id, spec=AnswerSpec(decision="rejected"))
    with pytest.raises(AlreadyAnswered, match="already answered \\(rejected\\)"):
        answer(user=world.member, run_id=run_id, spec=AnswerSpec(decision="approved"))
    assert Run.objects.get(pk=run_id).work["answer"]["decision"] == "rejected"


def test_cancelling_a_run_whose_executor_died_finishes_it_cancelled_at_once(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = queued_fork(world, monkeypatch)
    die_at(monkeypatch, "agent.responded", nth=1)
    execute_and_die(run_id)
    expire(run_id)
    run = cancel(user=world.member, run_id=run_id)
    assert (run.status, run.cancel_requested, run.lease_owner) == ("cancelled", True, "")
    assert types(run_id)[-1] == "run.cancelled"
    assert_contiguous(run_id)
    assert recovery.sweep() == []  # nothing left to recover


def test_cancelling_a_run_a_live_worker_holds_leaves_the_stop_to_it(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = queued_fork(world, monkeypatch)
    die_at(monkeypatch, "agent.responded", nth=1)
    owner = execute_and_die(run_id)  # its lease is still live (not expired)
    run = cancel(user=world.member, run_id=run_id)
    assert (run.status, run.cancel_requested, run.lease_owner) == ("running", True, owner)
    expire(run_id)
    assert recovery.sweep() == [run_id]
    assert drain(timeout=60)
    assert Run.objects.get(pk=run_id).status == "cancelled"
    assert_contiguous(run_id)


def test_two_workers_handed_one_run_never_both_execute_it(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = uninterrupted_calls(world, monkeypatch)
    run_id = queued_fork(world, monkeypatch)
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def worker() -> None:
        start.wait()
        outcomes.append(tasks.claim_and_drive(run_id))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(o.split(":")[0] for o in outcomes) == ["completed", "skipped"]
    assert types(run_id).count("run.started") == 1
    assert_contiguous(run_id)
    assert world.provider.paid == reference


def test_a_process_that_lost_its_lease_cannot_append(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = queued_fork(world, monkeypatch)
    die_at(monkeypatch, "node.started", nth=1)
    stale = execute_and_die(run_id)
    expire(run_id)
    assert leases.claim(run_id, owner="new-holder")
    before = types(run_id)
    from forklab.engine.events import RunFailed

    run = Run.objects.get(pk=run_id)
    with pytest.raises(LeaseLost, match="no longer leased to this process"):
        DjangoStore(run.project, lease=stale).append(run_id, [RunFailed(
            run_id=run_id, seq=run.last_seq + 1, at=1.0, error={"code": "x"})],
            expected_seq=run.last_seq)
    assert types(run_id) == before
    leases.release("new-holder")


def test_a_claim_is_a_compare_and_set(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = queued_fork(world, monkeypatch)
    assert leases.claim(run_id, owner="a")
    assert not leases.claim(run_id, owner="b")  # live: refused
    expire(run_id)
    assert leases.claim(run_id, owner="b")  # expired: taken over
    assert not leases.hand_over(run_id, expected_owner="a", token="t")  # a no longer holds it
    assert leases.hand_over(run_id, expected_owner="b", token="t")
    assert not leases.claim(run_id, owner="c")
    assert leases.claim(run_id, owner="c", token="t")  # the token's bearer takes it
    for stale in ("a", "b"):  # their heartbeats stop, as a dead process's would
        leases.keeper.drop(stale)
    leases.release("c")
    assert Run.objects.get(pk=run_id).lease_owner == "c"  # still queued: left expired
    assert recovery.sweep() == [run_id]
    assert drain(timeout=60)
    assert Run.objects.get(pk=run_id).status == "completed"


def test_a_fork_that_cannot_be_resumed_fails_worker_lost(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = queued_fork(world, monkeypatch)
    die_at(monkeypatch, "node.started", nth=1)
    execute_and_die(run_id)
    DjangoStore(world.project).archive(world.base.id)  # its base lost its events meanwhile
    expire(run_id)
    assert recovery.sweep() == [run_id]
    assert drain(timeout=60)
    run = Run.objects.get(pk=run_id)
    assert run.status == "failed" and run.error["code"] == "worker_lost"
    assert "cannot be resumed" in run.error["message"]
    assert_contiguous(run_id)


def test_a_run_whose_worker_keeps_dying_is_failed_after_three_recoveries(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = queued_fork(world, monkeypatch)
    die_at(monkeypatch, "node.started", nth=1)
    execute_and_die(run_id)
    Run.objects.filter(pk=run_id).update(work={"task": "fork", "recoveries": 3})
    expire(run_id)
    assert recovery.sweep() == [run_id]
    assert drain(timeout=60)
    run = Run.objects.get(pk=run_id)
    assert run.status == "failed" and run.error["code"] == "worker_lost"
    assert "lost 3 times" in run.error["message"]


def test_a_store_error_mid_tail_fails_the_run_with_its_code_never_leaving_it_running(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = queued_fork(world, monkeypatch)
    real = DjangoStore._insert
    calls = 0

    def refuse_fifth(self: DjangoStore, run: str, events: list, project_id: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 5:
            raise IntegrityError("CHECK constraint failed: JSON_VALID(payload)")
        real(self, run, events, project_id)

    monkeypatch.setattr(DjangoStore, "_insert", refuse_fifth)
    assert tasks.claim_and_drive(run_id) == "failed"
    run = Run.objects.get(pk=run_id)
    assert run.error["code"] == "store_rejected"
    assert "refused to store" in run.error["message"] and "seq_conflict" not in str(run.error)
    assert_contiguous(run_id)


def test_the_task_pool_is_one_per_process() -> None:
    from forklab.runs.task_backends import pool

    assert pool(4) is pool(16)


def test_a_bug_while_executing_fails_the_run_internal_error(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = queued_fork(world, monkeypatch)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(execution, "_start", broken)
    assert tasks.claim_and_drive(run_id) == "not_run"
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.error["code"], run.lease_owner) == ("failed", "internal_error", "")



def test_the_append_that_finishes_a_run_frees_its_lease_in_the_same_transaction(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = queued_fork(world, monkeypatch)
    die_at(monkeypatch, "run.completed")  # dies after the final event, before release()
    execute_and_die(run_id)
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.lease_owner, run.lease_expires_at) == ("completed", "", None)


def test_cancelling_a_paused_fork_wakes_its_streams_only_once_the_cancellation_committed(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wake-up sent inside the cancel's transaction sends a stream to read the log before
    the ``run.cancelled`` event is visible; the stream then waits for the next wake-up — and
    one naming an older seq is ignored as stale (``RunTail.stale``): the stream would not
    hear the cancellation until its next poll."""
    from django.db import connection

    from forklab.runs import broadcast

    run_id = paused_fork(world)
    sent: list[tuple[int, bool]] = []
    monkeypatch.setattr(broadcast, "notify", lambda run_id, seq: sent.append(
        (seq, connection.in_atomic_block)))
    cancel(user=world.member, run_id=run_id)
    last = Run.objects.get(pk=run_id).last_seq
    assert types(run_id)[-1] == "run.cancelled"
    assert sent and all(not inside for _seq, inside in sent), sent  # after the commit only
    assert all(seq == last for seq, _inside in sent), (sent, last)  # none looks stale


def test_a_cancel_that_arrives_while_the_executor_stops_at_a_gate_still_cancels_the_fork(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor paused the fork but still holds its lease, so ``cancel`` leaves the stop
    to it (``cancel_requested``) — it must not then let go of a paused fork nobody will
    cancel."""
    base = gated_base(world)
    monkeypatch.setattr(tasks, "enqueue_fork", lambda run_id, spec: None)
    run_id = start_fork(user=world.member, spec=ForkSpec(base_run=base.id, at="start")).run.id
    real = execution.drive

    def drive_then_cancel(run_id: str, *, owner: str) -> str:
        outcome = real(run_id, owner=owner)
        run = cancel(user=world.member, run_id=run_id)  # the lease is still this executor's
        assert (run.status, run.cancel_requested) == ("paused", True)
        return outcome

    monkeypatch.setattr(execution, "drive", drive_then_cancel)
    assert tasks.claim_and_drive(run_id) == "paused"
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.lease_owner) == ("cancelled", "")
    assert types(run_id)[-1] == "run.cancelled"
    assert_contiguous(run_id)


def test_an_answer_that_arrives_while_the_executor_stops_at_a_gate_still_continues_the_fork(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor paused the fork but still holds its lease, so the answer's
    ``continue_fork`` is skipped (the lease is taken) — the executor must not then let go of
    a paused fork whose stored answer nobody will apply (the stream waited for good)."""
    base = gated_base(world)
    monkeypatch.setattr(tasks, "enqueue_fork", lambda run_id, spec: None)
    run_id = start_fork(user=world.member, spec=ForkSpec(base_run=base.id, at="start")).run.id
    real = execution.drive
    continued: list[str] = []

    def drive_then_answer(run_id: str, *, owner: str) -> str:
        outcome = real(run_id, owner=owner)
        if not continued:  # the first drive only: it paused at the gate, lease still held
            answer(user=world.member, run_id=run_id, spec=AnswerSpec(decision="approved"))
            continued.append(outcome)
        return outcome

    def enqueue_answer(run_id: str, stored: dict[str, object]) -> None:
        continued.append(tasks.claim_and_drive(run_id))  # the queue runs it at once

    monkeypatch.setattr(execution, "drive", drive_then_answer)
    monkeypatch.setattr(tasks, "enqueue_answer", enqueue_answer)
    assert tasks.claim_and_drive(run_id) == "paused"
    # the answer's own task was skipped (lease taken); the one after_work enqueued ran it
    assert continued[0].startswith("skipped") and continued[1:] == ["paused", "completed"], \
        continued
    assert Run.objects.get(pk=run_id).status == "completed"
    assert_contiguous(run_id)
