"""A worker stores the result of a fork (or a sweep's variants) it just finished from the
result in hand — no log read — and what it stores is what a read rebuilding it from both logs
computes. A result held for a run that then moved on is not used."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from forklab.engine.fork import result as engine_result
from forklab.engine.scenarios import SCENARIOS
from forklab.runs import projections
from forklab.runs.forking import start_fork, start_sweep
from forklab.runs.models import ForkResult, Membership, Project, Role, Run
from forklab.runs.projections import ForkResultProjection
from forklab.runs.services import record_run
from forklab.runs.specs import ForkSpec, SweepSpec
from forklab.runs.store import DjangoStore
from forklab.runs.task_backends import drain

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def member() -> Any:
    user = get_user_model().objects.create_user("member")
    project = Project.objects.create(slug="held", name="Held")
    Membership.objects.create(user=user, project=project, role=Role.MEMBER)
    return user


def base_run() -> Run:
    scenario = SCENARIOS["research-write"]
    return record_run(project=Project.objects.get(slug="held"), graph=scenario.graph(),
                      input=scenario.input)


def no_log_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_: Any, **__: Any) -> Any:
        raise AssertionError("the worker rebuilt a result from the logs")

    monkeypatch.setattr(engine_result, "load_fork_result", refused)


def rebuilt(run_id: str) -> dict[str, Any]:
    run = Run.objects.select_related("project").get(pk=run_id)
    return ForkResultProjection.refresh(run, DjangoStore(run.project)).to_wire()


def test_a_finished_fork_stores_the_result_its_logs_rebuild(
        member: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    base = base_run()
    with monkeypatch.context() as patched:
        no_log_reads(patched)
        started = start_fork(user=member, spec=ForkSpec(
            base_run=base.id, at="before:write#1",
            changes=[{"kind": "model", "target": "write", "model": "scripted-small"}]))
        assert drain(timeout=60)
    stored = ForkResult.objects.get(run_id=started.run.id)
    assert stored.version == Run.objects.get(pk=started.run.id).last_seq
    assert stored.result == rebuilt(started.run.id)
    assert not projections._held  # handed over, not kept


def test_a_sweeps_variants_store_the_results_their_logs_rebuild(
        member: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    base = base_run()
    with monkeypatch.context() as patched:
        no_log_reads(patched)
        group = start_sweep(user=member, spec=SweepSpec(
            base_run=base.id, at={"before_node": "write"}, variants={
                "terse": [{"kind": "prompt", "target": "write", "system_prompt": "Be terse."}],
                "warm": [{"kind": "temperature", "target": "write", "temperature": 1.2}]}))
        assert drain(timeout=60)
    variants = list(Run.objects.filter(fork_group_id=group).values_list("id", flat=True))
    assert len(variants) == 2
    for run_id in variants:
        assert ForkResult.objects.get(run_id=run_id).result == rebuilt(run_id)


def test_a_result_held_for_another_last_seq_is_computed_from_the_logs(member: Any) -> None:
    base = base_run()
    started = start_fork(user=member, spec=ForkSpec(base_run=base.id, at="before:write#1"))
    assert drain(timeout=60)
    ForkResult.objects.filter(run_id=started.run.id).delete()
    stale = engine_result.load_fork_result(started.run.id, store=DjangoStore(base.project))
    projections._held[started.run.id] = (stale.state.version - 1, None)  # type: ignore[assignment]
    ForkResultProjection.after_run(started.run.id, DjangoStore)
    assert ForkResult.objects.get(run_id=started.run.id).result == rebuilt(started.run.id)
