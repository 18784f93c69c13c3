"""Planning a fork request: the engine's ``ForkPlan`` for a validated ``ForkSpec``.

The request path (``runs.forking``) plans — resolves the point, validates the changes,
estimates the tail — and stores the plan's inputs on the queued row (``Run.work["plan"]``);
the worker (``runs.execution``) rebuilds the plan from them (:func:`planned`) instead of
planning again. A sweep is planned once for all its variants (:func:`sweep_plan`: one point
resolution) and its worker rebuilds every variant's plan from its row
(:func:`planned_sweep`), the variants at one effective point sharing one prefix fold. Its own module because both use it and neither may import the other.
"""

from __future__ import annotations

from typing import Any

from forklab.engine.fork import ForkPlan, prepare_fork
from forklab.engine.fork.core import plan_from_inputs
from forklab.engine.fork.plan import PlanInputs
from forklab.engine.fork.sweep import SweepPlan, plan_sweep
from forklab.runs import bases
from forklab.runs.engine_env import build_environment
from forklab.runs.models import Project, Run
from forklab.runs.specs import ForkSpec, SweepSpec
from forklab.runs.store import DjangoStore


def plan_for(spec: ForkSpec, project: Project, base: Run | None = None) -> ForkPlan:
    """The engine's ForkPlan for a request (no calls; raises the engine's fork errors).

    With the base's row, the base comes from the per-process cache of loaded finished runs
    (``forklab.runs.bases``): a burst of forks of one run loads its log once.
    """
    env = build_environment()
    source: Any = bases.loaded(base, env) if base is not None else spec.base_run
    return prepare_fork(
        source, at=spec.at, change=spec.changes, policy=spec.policy,
        budget=spec.budget, ignore_budget=spec.ignore_budget, source=spec.source,
        store=DjangoStore(project), env=env, graph_version=spec.graph_version)


def stored_inputs(work: dict[str, Any] | None) -> PlanInputs | None:
    """The plan inputs a queued fork row holds (``Run.work["plan"]``), typed; None for a
    row queued without them."""
    data = (work or {}).get("plan")
    return None if data is None else PlanInputs.model_validate(data)


def planned(spec: ForkSpec, project: Project, base: Run | None,
            inputs: PlanInputs | None) -> ForkPlan:
    """The plan the request path made, for the worker: rebuilt from its stored ``inputs``
    (nothing resolved or estimated again; the base from the per-process cache). A row queued
    without them (before they were stored) is planned again from its request."""
    if inputs is None or base is None:
        return plan_for(spec, project, base)
    env = build_environment()
    return plan_from_inputs(bases.loaded(base, env), inputs, policy=spec.policy,
                            budget=spec.budget, graph_version=spec.graph_version)


def sweep_plan(spec: SweepSpec, base: Run) -> SweepPlan:
    """Every variant's plan of a sweep request, the point resolved once; raises the first
    variant's error (nothing is written for a sweep with a bad variant)."""
    planned = plan_sweep(bases.loaded(base, build_environment()), at=spec.at,
                         variants=spec.variants, policy=spec.policy, budget=spec.budget,
                         ignore_budget=spec.ignore_budget)
    planned.raise_first()
    return planned


def planned_sweep(spec: SweepSpec, base: Run, inputs: dict[str, PlanInputs | None]
                  ) -> SweepPlan:
    """The plans the request path made for a sweep's variants (``inputs``: each variant's
    stored plan inputs, in variant order), rebuilt for its worker: nothing resolved or
    estimated again, one prefix fold per effective point. A variant queued without inputs
    is planned again; one that cannot be rebuilt is an error of its own."""
    loaded = bases.loaded(base, build_environment())
    again = {name: spec.variants[name] for name, given in inputs.items() if given is None}
    planned = plan_sweep(loaded, at=spec.at, variants=again, policy=spec.policy,
                         budget=spec.budget, ignore_budget=spec.ignore_budget)
    for name, given in inputs.items():
        if given is None:
            continue
        try:
            planned.plans[name] = plan_from_inputs(loaded, given, policy=spec.policy,
                                                   budget=spec.budget,
                                                   prefixes=planned.prefixes)
        except Exception as exc:  # this variant fails alone, as in the engine's sweeps
            planned.errors[name] = exc
    planned.plans = {n: planned.plans[n] for n in inputs if n in planned.plans}
    return planned
