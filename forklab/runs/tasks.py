"""Background work through Django's tasks API: fork tails, answers, sweeps, recordings.

Task arguments are JSON (the queue may be another process). Each task re-reads what it needs
from the database: the request was validated before it was enqueued, but the world may have
moved (the run was cancelled meanwhile). A task never raises for a user error: the outcome is
recorded on the run (``not_run`` with its reason) instead.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.tasks import task

from forklab.engine.errors import ForklabError
from forklab.engine.events import Event
from forklab.engine.oracle import HumanAnswer
from forklab.engine.runner import CancelToken
from forklab.runs import broadcast
from forklab.runs.engine_env import build_environment
from forklab.runs.models import Run, RunStatus


class DbCancelToken(CancelToken):
    """Cancelled when the run row says so (works across processes and workers)."""

    def __init__(self, run_ids: list[str]) -> None:
        super().__init__()
        self.run_ids = run_ids

    @property
    def cancelled(self) -> bool:
        return super().cancelled or Run.objects.filter(
            pk__in=self.run_ids, cancel_requested=True).exists()


def _on_event(event: Event) -> None:
    broadcast.notify(event.run_id, event.seq)


def _not_run(run_id: str, exc: ForklabError) -> None:
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id, last_seq=0).first()
        if run is not None:
            run.status = RunStatus.FAILED
            run.error = {"code": exc.code, "message": exc.message, "not_run": True}
            run.save(update_fields=["status", "error"])
    broadcast.notify(run_id, 0)


@task
def execute_fork(run_id: str, spec: dict[str, Any]) -> str:
    from forklab.engine.fork.core import run_plan
    from forklab.runs.forking import plan_for
    from forklab.runs.specs import ForkSpec
    from forklab.runs.store import DjangoStore

    run = Run.objects.select_related("project").get(pk=run_id)
    if run.status != RunStatus.QUEUED:
        return run.status  # cancelled before it started
    fork_spec = ForkSpec.model_validate(spec)
    try:
        plan = plan_for(fork_spec, run.project)
        runner = run_plan(plan, run_id=run_id, label=fork_spec.label,
                          ignore_budget=fork_spec.ignore_budget, on_event=_on_event,
                          cancel=DbCancelToken([run_id]), store=DjangoStore(run.project))
    except ForklabError as exc:
        _not_run(run_id, exc)
        return "not_run"
    return runner.state.status


@task
def continue_fork(run_id: str, answer: dict[str, Any]) -> str:
    from forklab.engine.fork.core import fork_runner
    from forklab.runs.store import DjangoStore

    run = Run.objects.select_related("project").get(pk=run_id)
    runner = fork_runner(run_id, store=DjangoStore(run.project), env=build_environment(),
                         on_event=_on_event, cancel=DbCancelToken([run_id]))
    state = runner.answer(HumanAnswer(
        decision=answer["decision"], data=answer.get("data"),
        memory_updates=answer.get("memory_updates") or {}, label="live",
        answered_by=answer.get("answered_by", "")))
    return state.status


@task
def execute_sweep(group: str, spec: dict[str, Any], run_ids: dict[str, str]) -> str:
    from forklab.engine.fork.sweep import fork_each
    from forklab.runs.specs import SweepSpec
    from forklab.runs.store import DjangoStore

    sweep = SweepSpec.model_validate(spec)
    base = Run.objects.select_related("project").get(pk=sweep.base_run)
    live = {n: i for n, i in run_ids.items()
            if Run.objects.filter(pk=i, status=RunStatus.QUEUED).exists()}
    result = fork_each(
        base.id, at=sweep.at, variants={n: sweep.variants[n] for n in live},
        concurrency=sweep.concurrency, policy=sweep.policy.wire(), budget=sweep.budget.wire(),
        ignore_budget=sweep.ignore_budget, fork_group_id=group,
        store=DjangoStore(base.project), env=build_environment(),
        on_event=lambda _name, event: _on_event(event), run_ids=live)
    for name, error in result.errors.items():
        _not_run(live[name], _SweepVariantError(error.get("detail", ""), error.get("code")))
    return f"{len(result.results)} ok, {len(result.errors)} failed"


class _SweepVariantError(ForklabError):
    def __init__(self, message: str, code: str | None) -> None:
        super().__init__(message)
        self.code = code or "variant_failed"  # type: ignore[misc]


@task
def execute_recording(run_id: str, project_id: int, graph_id: str, version: int,
                      input: dict[str, Any], label: str) -> str:
    from forklab.engine.runner import Runner
    from forklab.runs.store import DjangoStore

    run = Run.objects.select_related("project").get(pk=run_id)
    if run.status != RunStatus.QUEUED:
        return run.status
    store = DjangoStore(run.project)
    try:
        graph = store.load_graph(graph_id, version)
        runner = Runner(graph, store=store, run_id=run_id, env=build_environment(),
                        on_event=_on_event, cancel=DbCancelToken([run_id]),
                        graph_version=version)
        return runner.start(input, label=label).status
    except ForklabError as exc:  # e.g. the graph version vanished: never leave it queued
        _not_run(run_id, exc)
        return "not_run"


def enqueue_fork(run_id: str, spec: dict[str, Any]) -> None:
    execute_fork.enqueue(run_id, spec)


def enqueue_answer(run_id: str, answer: dict[str, Any]) -> None:
    continue_fork.enqueue(run_id, answer)


def enqueue_sweep(group: str, spec: dict[str, Any], run_ids: dict[str, str]) -> None:
    execute_sweep.enqueue(group, spec, run_ids)


def enqueue_recording(run_id: str, project_id: int, graph_id: str, version: int,
                      input: dict[str, Any], label: str) -> None:
    execute_recording.enqueue(run_id, project_id, graph_id, version, input, label)
