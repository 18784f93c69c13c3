"""Fork use cases: preflight, start, cancel, answer, sweeps, diff, promote, cases.

Every function takes the acting user, checks access (``forklab.runs.access``), validates
the whole request with the engine before anything is written (so a bad request loses
nothing), and hands execution to a background task that starts only once the rows it is
about are committed (``tasks.enqueue_fork``: in the same transaction when the queue allows,
else with ``transaction.on_commit``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from forklab.engine.canonical import canonical_equals
from forklab.engine.errors import ForklabError, RunInProgress, RunStateError, indefinite
from forklab.engine.fork import ForkPlan, fork_points
from forklab.engine.fork.lifecycle import Case as EngineCase
from forklab.engine.fork.lifecycle import (
    CaseResult,
    PromoteResult,
    promote,
    run_case_against,
    save_case,
)
from forklab.engine.fork.sweep import estimate_sweep as engine_estimate_sweep
from forklab.engine.fork.wire import (
    DiffSummaryWire,
    PreflightWire,
    RunDiffWire,
    SweepEstimateWire,
    SweepVariantWire,
    SweepWire,
)
from forklab.engine.graph import Condition
from forklab.runs import bases, inserts, queries, readcache, tasks
from forklab.runs.access import (
    User,
    account,
    readable_run_and_role,
    require_fork_rights,
    require_role,
    signed_in,
)
from forklab.runs.control import answer as answer
from forklab.runs.control import cancel as cancel
from forklab.runs.engine_env import build_environment
from forklab.runs.errors import (
    IdempotencyConflict,
    NotFound,
)
from forklab.runs.imported_forks import fork_points as mapped_fork_points
from forklab.runs.imported_forks import imported_fork_kind, require_settled, workflow_base
from forklab.runs.models import Case, ForkRequest, Project, Role, Run, RunKind, RunStatus
from forklab.runs.planning import plan_for, sweep_plan
from forklab.runs.readmodel import fork_state
from forklab.runs.specs import CaseSpec, ForkSpec, InvalidRequest, SweepSpec
from forklab.runs.store import DjangoStore


class CaseExists(ForklabError):
    code = "case_exists"


def _base_run(user: User, run_id: str) -> Run:
    return queries.get_run(run_id, user=user)


def _check_fork_rights(user: User, project: Project, spec: ForkSpec | SweepSpec,
                       **role: Any) -> None:
    require_fork_rights(user, project, policy=spec.policy, budget=spec.budget,
                        ignore_budget=spec.ignore_budget, **role)


def preflight(*, user: User, spec: ForkSpec) -> PreflightWire:
    """What a fork would do and cost; starts nothing (but the workflow base of a mapped
    imported run, derived data written once)."""
    base, role = readable_run_and_role(user, spec.base_run)
    _check_fork_rights(user, base.project, spec, role=role)
    _require_finished(base)
    base, spec = _forked_base(user, base, spec)
    return PreflightWire.from_wire(plan_for(spec, base.project, base).preflight())


def _forked_base[S: (ForkSpec, SweepSpec)](user: User, run: Run, spec: S) -> tuple[Run, S]:
    """The run a fork of ``run`` really forks, and the request re-addressed to it: ``run``
    itself, or — for a run imported from a trace whose name FORKLAB_WORKFLOW_MAP maps to a
    workflow — its workflow base (``runs.imported_forks``, SPEC §8 (b))."""
    # a sweep's variants are one base: its input comes from the trace, never from a variant
    base = fork_base(run, created_by=account(user),
                     changes=spec.changes if isinstance(spec, ForkSpec) else ())
    return (run, spec) if base is run else (base, spec.model_copy(update={"base_run": base.id}))


def fork_base(run: Run, *, created_by: Any = None, changes: Sequence[Any] = ()) -> Run:
    """The run a fork (sweep, preflight, fork-check) of ``run`` forks: ``run`` itself; for
    a run imported from a trace whose name FORKLAB_WORKFLOW_MAP maps to a workflow, its
    workflow base (``runs.imported_forks``, written once; ``changes``' input patch gives the
    workflow's arguments when the trace captured none). Any other imported run is forked
    as it is: one replayable call re-asked (``engine.fork.onecall``, SPEC §8 (a))."""
    if run.trace_id and imported_fork_kind(run) == "workflow":
        return workflow_base(run, created_by=created_by, changes=changes)
    return run


def require_recorded(run: Run) -> None:
    """Refuse a run that recorded no event, saying why, before anything reads its log (an
    empty log folds to a queued primary run, which every later message would misreport): a
    fork that never ran is ``invalid_run_state`` with the reason it did not run; a run not
    started yet is ``run_in_progress``. An archived run is left to ``source_missing``."""
    if run.last_seq or run.archived:
        return
    if not run.finished:
        raise RunInProgress(
            f"run {run.id!r} is {run.status} and has recorded nothing yet; wait for it to "
            "finish, then try again", run_id=run.id, status=run.status)
    error = run.error or {}
    why = f"{error.get('code', 'not_run')}: {error.get('message', 'no reason recorded')}"
    again = (f"; fork its base {run.parent_run_id!r} again" if run.parent_run_id else "")
    raise RunStateError(
        f"run {run.id!r} never ran ({why.rstrip('.')}); it recorded no events, so it has no "
        f"result, case, diff or fork points{again}", run_id=run.id,
        not_run_reason=error.get("code", "not_run"))


def _require_finished(run: Run) -> None:
    if not run.finished:
        raise RunInProgress(
            f"run {run.id!r} is {run.status}; only a finished run can be forked — wait for it, "
            "answer it or cancel it first", run_id=run.id, status=run.status)
    require_settled(run)


def fork_points_of(run: Run) -> list[dict[str, Any]]:
    """``GET /runs/{id}/fork-points/`` and ``forklab forkpoints``: every addressable point
    of ``run`` (wire form). A run imported from a trace whose name is mapped to a workflow
    lists its workflow base's points — before every call the code makes — since a fork of
    it forks that base (worked out here, nothing stored)."""
    if run.trace_id and imported_fork_kind(run) == "workflow":
        return [p.to_wire() for p in mapped_fork_points(run)]
    store = DjangoStore(run.project)
    return [p.to_wire() for p in fork_points(store.read(run.id), store=store)]


@dataclass(frozen=True)
class StartedFork:
    run: Run
    created: bool


def start_fork(*, user: User, spec: ForkSpec) -> StartedFork:
    """Validate, record the queued fork run, and enqueue its tail.

    The same ``client_request_id`` from the same user in the same project returns the
    existing fork (``created`` False) and starts nothing — if the body is the same; reused
    with a different body it is ``idempotency_conflict``.
    """
    base, role = readable_run_and_role(user, spec.base_run)
    project = base.project
    _check_fork_rights(user, project, spec, role=role)
    known = _known_request(user, project, spec)
    if known is not None:
        return StartedFork(run=known, created=False)
    _require_finished(base)
    asked = spec  # what the client sent: the body a repeated client_request_id must match
    base, spec = _forked_base(user, base, spec)
    plan = plan_for(spec, project, base)  # every validation error surfaces here, first
    run_id = spec.run_id or uuid.uuid4().hex
    if spec.run_id and Run.objects.filter(pk=run_id).exists():
        raise InvalidRequest(f"run id {run_id!r} is taken; choose another or omit run_id",
                             field="run_id")
    try:
        with transaction.atomic():
            # enqueued first, so the row is inserted with its task id: the task commits
            # with the row (or starts once it committed), never before
            task_id = tasks.enqueue_fork(run_id, spec.wire())
            run = _queued_fork(run_id, base, plan, spec, user, task_id=task_id or "")
            if spec.client_request_id:
                ForkRequest.objects.create(project=project,
                                           user=signed_in(user, action="forking"),
                                           client_request_id=spec.client_request_id,
                                           fork_run=run, body=asked.wire())
    except IntegrityError:  # the same key raced in from a second request
        raced = _known_request(user, project, spec)
        if raced is None:
            raise
        return StartedFork(run=raced, created=False)
    return StartedFork(run=run, created=True)


def _known_request(user: User, project: Project, spec: ForkSpec) -> Run | None:
    """The fork an earlier request with this ``client_request_id`` started (None: new key);
    ``idempotency_conflict`` when that request's body differs from this one."""
    if not spec.client_request_id:
        return None
    known = (ForkRequest.objects.select_related("fork_run__project")
             .filter(project=project, user=user,  # type: ignore[misc]
                     client_request_id=spec.client_request_id).first())
    if known is None or known.fork_run is None:
        return None
    if not canonical_equals(known.body, spec.wire()):
        raise IdempotencyConflict(
            f"client_request_id {spec.client_request_id!r} was already used for a different "
            f"fork request (fork {known.fork_run.id}); use a new id for a new request, or "
            "resend the same body", client_request_id=spec.client_request_id,
            run_id=known.fork_run.id)
    return known.fork_run


def _queued_fork(run_id: str, base: Run, plan: ForkPlan, spec: ForkSpec, user: User,
                 fork_group_id: str | None = None, task_id: str = "") -> Run:
    """The queued fork row, holding its validated request (``work``: the ForkSpec's JSON
    form, its changes normalised) and its plan's inputs (resolved points, estimate), from
    which the worker builds the tail without planning again and lost work is redone."""
    run = Run(
        work={"task": "fork", "spec": spec.wire(), "plan": plan.inputs().wire()}, task_id=task_id,
        id=run_id, project=base.project, graph_version_id=base.graph_version_id,
        graph_slug=base.graph_slug, graph_version_number=base.graph_version_number,
        run_kind=RunKind.COUNTERFACTUAL, status=RunStatus.QUEUED, label=spec.label,
        created_by=account(user), parent_run=base,
        fork_sequence_id=plan.point.seq, fork_node_id=plan.effective.node,
        fork_mutations=plan.combined, fork_group_id=fork_group_id,
        replay_version=base.replay_version, input=plan.new_input)
    inserts.insert(run)
    return run


# -- sweeps ------------------------------------------------------------------------------------


def estimate_sweep(*, user: User, spec: SweepSpec) -> SweepEstimateWire:
    base = _base_run(user, spec.base_run)
    _check_fork_rights(user, base.project, spec)
    _require_finished(base)
    base, spec = _forked_base(user, base, spec)
    return SweepEstimateWire.from_wire(engine_estimate_sweep(
        bases.loaded(base, build_environment()), at=spec.at, variants=spec.variants,
        policy=spec.policy, budget=spec.budget))


def start_sweep(*, user: User, spec: SweepSpec) -> str:
    """Validate every variant (the sweep planned once), record one queued run each holding
    its plan's inputs, enqueue the sweep; returns the group."""
    base = _base_run(user, spec.base_run)
    _check_fork_rights(user, base.project, spec)
    _require_finished(base)
    base, spec = _forked_base(user, base, spec)
    group = uuid.uuid4().hex
    planned = sweep_plan(spec, base)
    run_ids = {}
    with transaction.atomic():
        for name, plan in planned.plans.items():
            run = _queued_fork(uuid.uuid4().hex, base, plan, spec.variant(name), user,
                               fork_group_id=group)
            run_ids[name] = run.id
        transaction.on_commit(lambda: tasks.enqueue_sweep(group, spec, run_ids))
    return group


@dataclass(frozen=True)
class SweepGroup:
    """A sweep's variant runs (by name) and what they share: their base and fork point."""

    fork_group_id: str
    base_run_id: str
    fork_sequence_id: int | None
    variants: dict[str, Run]

    @classmethod
    def of(cls, group_id: str, runs: list[Run]) -> SweepGroup:
        """The group of ``runs`` (non-empty, all of one sweep: one base, one point)."""
        first = runs[0]
        return cls(fork_group_id=group_id, base_run_id=str(first.parent_run_id),
                   fork_sequence_id=first.fork_sequence_id,
                   variants={r.label: r for r in runs})


def sweep_detail(*, user: User, group_id: str) -> SweepGroup:
    runs = list(queries.runs_for_user(user).filter(fork_group_id=group_id).order_by("label"))
    if not runs:
        raise NotFound(f"no sweep {group_id!r}", fork_group_id=group_id)
    return SweepGroup.of(group_id, runs)


# -- reading results ---------------------------------------------------------------------------


def diff(*, user: User, base_id: str, variant_id: str) -> RunDiffWire:
    """RunDiff between any two readable runs: the read model's comparison (the one the
    dashboard's diff page shows; finished runs' stored final states, no log folded)."""
    base, variant = _base_run(user, base_id), _base_run(user, variant_id)
    return RunDiffWire.from_wire(readcache.run_diff(base, variant).wire())


def promote_fork(*, user: User, run_id: str, only_applied: bool = False) -> PromoteResult:
    run = _base_run(user, run_id)
    require_role(user, run.project, Role.ADMIN, action="promoting a fork into the graph")
    require_recorded(run)
    return promote(run_id, store=DjangoStore(run.project), only_applied=only_applied)


def save_fork_as_case(*, user: User, run_id: str, spec: CaseSpec) -> Case:
    run = _base_run(user, run_id)
    require_role(user, run.project, Role.MEMBER, action="saving a case")
    return save_run_as_case(run=run, spec=spec, created_by=account(user))


def save_run_as_case(*, run: Run, spec: CaseSpec, created_by: Any = None) -> Case:
    """Save ``run`` (a finished fork) as a case of its project, access already checked (the
    API's use case above; the CLI, a local operator). A taken name is ``case_exists``."""
    require_recorded(run)
    if Case.objects.filter(project=run.project, name=spec.name).exists():
        raise CaseExists(f"project {run.project.slug!r} already has a case named "
                         f"{spec.name!r}; choose another name", name=spec.name)
    case = save_case(run.id, name=spec.name, store=DjangoStore(run.project),
                     criteria=spec.criteria)
    return Case.objects.create(
        project=run.project, name=spec.name, source_run=run, graph_version=run.graph_version,
        input=case.input, changes=case.changes,
        recorded=case.model_dump(mode="json"), criteria=case_criteria(spec.criteria),
        created_by=created_by)


def case_criteria(criteria: Sequence[Condition]) -> list[dict[str, Any]]:
    """The JSON a ``Case`` row keeps of its criteria (each condition's full wire form)."""
    return [c.model_dump(mode="json") for c in criteria]


def run_cases(*, user: User, project: str | None = None,
              graph_version: int | None = None) -> list[tuple[str, CaseResult]]:
    """Replay every readable case (optionally one project's): each one's project slug and
    result (pass or fail)."""
    cases = Case.objects.filter(project__in=queries.visible_projects(user))
    if project:
        cases = cases.filter(project__slug=project)
    return run_case_rows(cases, graph_version=graph_version)


def run_case_rows(cases: QuerySet[Case], *,
                  graph_version: int | None = None) -> list[tuple[str, CaseResult]]:
    """Run each case against its graph's current version in its project (or version
    ``graph_version`` of it), in project and name order: a regression suite fails when a
    graph edit breaks a case's criterion. Each result names the version it ran against."""
    results = []
    for row in cases.select_related("project").order_by("project__slug", "name"):
        result = run_case_against(EngineCase.model_validate(row.recorded),
                                  store=DjangoStore(row.project), version=graph_version)
        results.append((row.project.slug, result))
    return results


# -- the API's fork and sweep bodies -----------------------------------------------------------


def get_fork(*, user: User, run_id: str) -> Run:
    """A readable counterfactual run; any other run is not_found here."""
    run = _base_run(user, run_id)
    if not run.is_fork:
        raise NotFound(f"run {run_id!r} is {indefinite(run.run_kind)} run, not a fork",
                       run_id=run_id)
    return run


def sweep_summary(*, user: User, group_id: str) -> SweepWire:
    """``GET /sweeps/{id}/``: each variant's status, run id, incurred cost and — once it
    finished — a summary of its diff against the base."""
    detail = sweep_detail(user=user, group_id=group_id)
    base: Run | None = None
    variants: dict[str, SweepVariantWire] = {}
    for name, run in detail.variants.items():
        state, reason = fork_state(run)
        summary = None
        if run.finished and run.last_seq:
            base = base or _base_run(user, run.parent_run_id or "")
            summary = DiffSummaryWire.of(RunDiffWire.from_wire(
                readcache.run_diff(base, run).wire()))
        variants[name] = SweepVariantWire(
            run_id=run.id, status=RunStatus(run.status), state=state, not_run_reason=reason,
            incurred_cost_usd=_usd_or_none(run.incurred_cost_usd), error=run.error,
            diff=summary)
    costs = [v.incurred_cost_usd for v in variants.values()]
    total = None if None in costs else round(sum(c or 0.0 for c in costs), 10)
    return SweepWire(fork_group_id=group_id, base_run_id=detail.base_run_id,
                     fork_sequence_id=detail.fork_sequence_id, incurred_cost_usd=total,
                     variants=variants)


def _usd_or_none(value: Any) -> float | None:
    """A stored amount as a float; None stays None (an unpriced call made it unknown)."""
    return None if value is None else float(value)
