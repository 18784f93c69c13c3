"""Fork use cases: preflight, start, cancel, answer, sweeps, diff, promote, cases.

Every function takes the acting user, checks access (``forklab.runs.access``), validates
the whole request with the engine before anything is written (so a bad request loses
nothing), and hands execution to a background task with ``transaction.on_commit``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from forklab.engine.errors import ForklabError, RunInProgress, RunStateError
from forklab.engine.fork import prepare_fork
from forklab.engine.fork.diff import diff_runs
from forklab.engine.fork.lifecycle import Case as EngineCase
from forklab.engine.fork.lifecycle import promote, run_case, save_case
from forklab.engine.fork.sweep import estimate_sweep as engine_estimate_sweep
from forklab.engine.reducers import fold
from forklab.runs import broadcast, queries, tasks
from forklab.runs.access import User, require_fork_rights, require_role
from forklab.runs.engine_env import build_environment
from forklab.runs.errors import NotFound
from forklab.runs.models import Case, ForkRequest, Project, Role, Run, RunKind, RunStatus
from forklab.runs.specs import AnswerSpec, CaseSpec, ForkSpec, InvalidRequest, SweepSpec
from forklab.runs.store import DjangoStore


class CaseExists(ForklabError):
    code = "case_exists"


def _base_run(user: User, run_id: str) -> Run:
    return queries.get_run(run_id, user=user)


def _check_fork_rights(user: User, project: Project, spec: ForkSpec | SweepSpec) -> None:
    require_fork_rights(user, project, policy=spec.policy.wire(),
                        budget=spec.budget.explicit(), ignore_budget=spec.ignore_budget)


def plan_for(spec: ForkSpec, project: Project) -> Any:
    """The engine's ForkPlan for a request (no calls; raises the engine's fork errors)."""
    return prepare_fork(
        spec.base_run, at=spec.at, change=spec.changes, policy=spec.policy.wire(),
        budget=spec.budget.wire(), ignore_budget=spec.ignore_budget, source=spec.source,
        store=DjangoStore(project), env=build_environment(), graph_version=spec.graph_version)


def preflight(*, user: User, spec: ForkSpec) -> dict[str, Any]:
    """What a fork would do and cost; starts nothing."""
    base = _base_run(user, spec.base_run)
    _check_fork_rights(user, base.project, spec)
    _require_finished(base)
    return dict(plan_for(spec, base.project).preflight())


def _require_finished(run: Run) -> None:
    if not run.finished:
        raise RunInProgress(
            f"run {run.id!r} is {run.status}; only a finished run can be forked — wait for it, "
            "answer it or cancel it first", run_id=run.id, status=run.status)


@dataclass(frozen=True)
class StartedFork:
    run: Run
    created: bool


def start_fork(*, user: User, spec: ForkSpec) -> StartedFork:
    """Validate, record the queued fork run, and enqueue its tail.

    The same ``client_request_id`` from the same user in the same project returns the
    existing fork (``created`` False) and starts nothing.
    """
    base = _base_run(user, spec.base_run)
    project = base.project
    _check_fork_rights(user, project, spec)
    if spec.client_request_id:
        known = ForkRequest.objects.filter(project=project, user=user,  # type: ignore[misc]
                                           client_request_id=spec.client_request_id).first()
        if known is not None and known.fork_run is not None:
            return StartedFork(run=known.fork_run, created=False)
    _require_finished(base)
    plan = plan_for(spec, project)  # every validation error surfaces here, before any write
    run_id = spec.run_id or uuid.uuid4().hex
    if Run.objects.filter(pk=run_id).exists():
        raise InvalidRequest(f"run id {run_id!r} is taken; choose another or omit run_id",
                             field="run_id")
    try:
        with transaction.atomic():
            run = _queued_fork(run_id, base, plan, spec, user)
            if spec.client_request_id:
                ForkRequest.objects.create(project=project, user=user,
                                           client_request_id=spec.client_request_id,
                                           fork_run=run, body=spec.model_dump(mode="json"))
            transaction.on_commit(lambda: tasks.enqueue_fork(run_id, spec.model_dump(mode="json")))
    except IntegrityError:  # the same key raced in from a second request
        known = ForkRequest.objects.get(project=project, user=user,  # type: ignore[misc]
                                        client_request_id=spec.client_request_id)
        return StartedFork(run=known.fork_run, created=False)  # type: ignore[arg-type]
    return StartedFork(run=run, created=True)


def _queued_fork(run_id: str, base: Run, plan: Any, spec: ForkSpec, user: User,
                 fork_group_id: str | None = None) -> Run:
    return Run.objects.create(
        id=run_id, project=base.project, graph_version=base.graph_version,
        graph_slug=base.graph_slug, graph_version_number=base.graph_version_number,
        run_kind=RunKind.COUNTERFACTUAL, status=RunStatus.QUEUED, label=spec.label,
        created_by=user if user.is_authenticated else None, parent_run=base,
        fork_sequence_id=plan.point.seq, fork_node_id=plan.effective.node,
        fork_mutations=plan.combined, fork_group_id=fork_group_id,
        replay_version=base.replay_version, input=plan.new_input)


def cancel(*, user: User, run_id: str) -> Run:
    """Ask a queued, running or paused run to stop; a run that never started stops now."""
    run = _base_run(user, run_id)
    require_role(user, run.project, Role.MEMBER, action="cancelling a run")
    if run.finished:
        return run
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        run.cancel_requested = True
        fields = ["cancel_requested"]
        if run.last_seq == 0 or run.status == RunStatus.PAUSED:
            # nothing is executing it: record the outcome directly
            fields += _cancel_now(run)
        run.save(update_fields=fields)
        # no runner is executing it to send wake-ups: tell open streams the run moved on
        transaction.on_commit(lambda: broadcast.notify(run.id, run.last_seq))
    return run


def _cancel_now(run: Run) -> list[str]:
    if run.last_seq:
        from forklab.engine.events import RunCancelled

        store = DjangoStore(run.project)
        store.append(run.id, [RunCancelled(run_id=run.id, seq=run.last_seq + 1,
                                           at=build_environment().clock(),
                                           reason="cancelled while paused")],
                     expected_seq=run.last_seq)
        run.refresh_from_db()
        run.cancel_requested = True  # the refresh read the flag from before this request
        return []
    run.status = RunStatus.CANCELLED
    run.error = {"code": "cancelled", "message": "cancelled before it started"}
    return ["status", "error"]


def answer(*, user: User, run_id: str, spec: AnswerSpec) -> Run:
    """Answer the approval gate a paused fork waits at; the tail continues in the background."""
    run = _base_run(user, run_id)
    require_role(user, run.project, Role.MEMBER, action="answering an approval gate")
    if run.status != RunStatus.PAUSED:
        raise RunStateError(f"run {run_id!r} is {run.status}, not paused at an approval gate",
                            run_id=run_id, status=run.status)
    answered_by = getattr(user, "username", "") or "api"
    transaction.on_commit(lambda: tasks.enqueue_answer(run_id, {**spec.model_dump(mode="json"),
                                                                "answered_by": answered_by}))
    return run


# -- sweeps ------------------------------------------------------------------------------------


def estimate_sweep(*, user: User, spec: SweepSpec) -> dict[str, Any]:
    base = _base_run(user, spec.base_run)
    _check_fork_rights(user, base.project, spec)
    _require_finished(base)
    return engine_estimate_sweep(base.id, at=spec.at, variants=spec.variants,
                                 policy=spec.policy.wire(), budget=spec.budget.wire(),
                                 store=DjangoStore(base.project), env=build_environment())


def start_sweep(*, user: User, spec: SweepSpec) -> str:
    """Validate every variant, record one queued run each, enqueue the sweep; returns the group."""
    base = _base_run(user, spec.base_run)
    _check_fork_rights(user, base.project, spec)
    _require_finished(base)
    group = uuid.uuid4().hex
    plans = {}
    for name, changes in spec.variants.items():
        one = ForkSpec(base_run=spec.base_run, at=spec.at, changes=_as_list(changes),
                       policy=spec.policy, budget=spec.budget, label=name,
                       ignore_budget=spec.ignore_budget)
        plans[name] = (one, plan_for(one, base.project))
    run_ids = {}
    with transaction.atomic():
        for name, (one, plan) in plans.items():
            run = _queued_fork(uuid.uuid4().hex, base, plan, one, user, fork_group_id=group)
            run_ids[name] = run.id
        transaction.on_commit(lambda: tasks.enqueue_sweep(group, spec.model_dump(mode="json"),
                                                          run_ids))
    return group


def _as_list(changes: Any) -> list[dict[str, Any]]:
    return changes if isinstance(changes, list) else [changes]


def sweep_detail(*, user: User, group_id: str) -> dict[str, Any]:
    runs = list(queries.runs_for_user(user).filter(fork_group_id=group_id).order_by("label"))
    if not runs:
        raise NotFound(f"no sweep {group_id!r}", fork_group_id=group_id)
    return {"fork_group_id": group_id, "base_run_id": runs[0].parent_run_id,
            "fork_sequence_id": runs[0].fork_sequence_id,
            "variants": {r.label: r for r in runs}}


# -- reading results ---------------------------------------------------------------------------


def diff(*, user: User, base_id: str, variant_id: str) -> dict[str, Any]:
    """RunDiff between any two readable runs."""
    base, variant = _base_run(user, base_id), _base_run(user, variant_id)
    states = []
    for run in (base, variant):
        events = DjangoStore(run.project).read(run.id)
        if not events:
            raise NotFound(f"run {run.id!r} has no events to compare", run_id=run.id)
        states.append(fold(events))
    return diff_runs(states[0], states[1], changes=[
        str(c.get("kind")) for c in variant.fork_mutations or []]).wire()


def promote_fork(*, user: User, run_id: str) -> dict[str, Any]:
    run = _base_run(user, run_id)
    require_role(user, run.project, Role.ADMIN, action="promoting a fork into the graph")
    return promote(run_id, store=DjangoStore(run.project)).wire()


def save_fork_as_case(*, user: User, run_id: str, spec: CaseSpec) -> Case:
    run = _base_run(user, run_id)
    require_role(user, run.project, Role.MEMBER, action="saving a case")
    _check_criteria(spec.criteria)
    if Case.objects.filter(project=run.project, name=spec.name).exists():
        raise CaseExists(f"project {run.project.slug!r} already has a case named "
                         f"{spec.name!r}; choose another name", name=spec.name)
    case = save_case(run_id, name=spec.name, store=DjangoStore(run.project),
                     criteria=spec.criteria)
    return Case.objects.create(
        project=run.project, name=spec.name, source_run=run, graph_version=run.graph_version,
        input=case.input, changes=case.changes,
        recorded=case.model_dump(mode="json"), criteria=spec.criteria,
        created_by=user if user.is_authenticated else None)


def _check_criteria(criteria: list[dict[str, Any]]) -> None:
    """Each criterion must be a condition over final memory (``{key, op, value}``)."""
    from pydantic import ValidationError

    from forklab.engine.graph import Condition

    for i, item in enumerate(criteria):
        try:
            Condition.model_validate(item)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(p) for p in ("criteria", i, *error["loc"]))
            raise InvalidRequest(f"field '{field}': {error['msg']}", field=field) from None


def run_cases(*, user: User, project: str | None = None) -> list[dict[str, Any]]:
    """Replay every readable case (optionally one project's); each result says pass or fail."""
    cases = Case.objects.filter(project__in=queries.visible_projects(user))
    if project:
        cases = cases.filter(project__slug=project)
    results = []
    for row in cases.order_by("project__slug", "name"):
        result = run_case(EngineCase.model_validate(row.recorded))
        results.append({"project": row.project.slug, **result.wire()})
    return results


# -- the API's fork and sweep bodies -----------------------------------------------------------

_RESULT_FIELDS = ("estimate", "incurred_cost_usd", "suppressed_effects", "memo_hits", "calls",
                  "diff", "explain", "warnings", "effective_fork_sequence_id")


def fork_state(run: Run) -> tuple[str, str | None]:
    """``(state, not_run_reason)``: the run status in the fork vocabulary of SPEC §4.3.

    ``completed`` reads ``complete``; a fork that failed before writing any event (its
    request no longer fitted the base when the task ran) is ``not_run`` with the error code.
    """
    error = run.error or {}
    if run.status == RunStatus.FAILED and error.get("not_run"):
        return "not_run", str(error.get("code") or "not_run")
    if run.status == RunStatus.COMPLETED:
        return "complete", None
    return str(run.status), None


def fork_body(run: Run) -> dict[str, Any]:
    """The Fork shape: Run fields, state, and the Fork result fields once it finished
    (null until then)."""
    from forklab.engine.fork.result import load_fork_result
    from forklab.runs.serializers_json import run_to_json

    state, reason = fork_state(run)
    body = {**run_to_json(run), "state": state, "not_run_reason": reason,
            "cancel_requested": run.cancel_requested, "base_run_id": run.parent_run_id,
            "changes": run.fork_mutations, **dict.fromkeys(_RESULT_FIELDS)}
    if run.finished and run.last_seq:
        try:
            result = load_fork_result(run.id, store=DjangoStore(run.project),
                                      env=build_environment()).to_wire()
        except ForklabError as exc:  # e.g. its base run was deleted since
            body["warnings"] = [f"the result cannot be rebuilt: {exc.code}: {exc.message}"]
        else:
            body.update({key: result[key] for key in _RESULT_FIELDS})
            body["changes"] = result["changes"]
    return body


def get_fork(*, user: User, run_id: str) -> Run:
    """A readable counterfactual run; any other run is not_found here."""
    run = _base_run(user, run_id)
    if run.run_kind != RunKind.COUNTERFACTUAL:
        raise NotFound(f"run {run_id!r} is a {run.run_kind} run, not a fork", run_id=run_id)
    return run


def fork_detail(*, user: User, run_id: str) -> dict[str, Any]:
    """``GET /forks/{id}/``: a readable fork as the Fork shape."""
    return fork_body(get_fork(user=user, run_id=run_id))


def sweep_summary(*, user: User, group_id: str) -> dict[str, Any]:
    """``GET /sweeps/{id}/``: each variant's status, run id, incurred cost and — once it
    finished — a summary of its diff against the base."""
    detail = sweep_detail(user=user, group_id=group_id)
    base_state = None
    variants: dict[str, Any] = {}
    for name, run in detail["variants"].items():
        state, reason = fork_state(run)
        summary = None
        if run.finished and run.last_seq:
            if base_state is None:
                base_state = _final_state(_base_run(user, run.parent_run_id or ""))
            summary = _diff_summary(diff_runs(base_state, _final_state(run)).wire())
        variants[name] = {"run_id": run.id, "status": run.status, "state": state,
                          "not_run_reason": reason,
                          "incurred_cost_usd": float(run.incurred_cost_usd),
                          "error": run.error, "diff": summary}
    total = sum(v["incurred_cost_usd"] for v in variants.values())
    return {**{k: detail[k] for k in ("fork_group_id", "base_run_id", "fork_sequence_id")},
            "incurred_cost_usd": round(total, 10), "variants": variants}


def _final_state(run: Run) -> Any:
    events = DjangoStore(run.project).read(run.id)
    if not events:
        raise NotFound(f"run {run.id!r} has no events to compare", run_id=run.id)
    return fold(events)


def _diff_summary(diff: dict[str, Any]) -> dict[str, Any]:
    cost = diff["cost"]
    return {"divergence": diff["divergence"], "terminal": diff["terminal"],
            "tokens_delta": cost["tokens_delta"], "usd_delta": cost["usd_delta"],
            "incurred_usd": cost["incurred_usd"],
            "memory": {key: delta["op"] for key, delta in diff["memory"].items()},
            "inserted": diff["path"]["inserted"], "skipped": diff["path"]["skipped"],
            "suppressed_effects": len(diff["suppressed_effects"])}
