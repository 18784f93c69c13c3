"""Planning a fork request: the engine's ``ForkPlan`` for a validated ``ForkSpec``.

The request path (``runs.forking``) plans — resolves the point, validates the changes,
estimates the tail — and stores the plan's inputs on the queued row (``Run.work["plan"]``);
the worker (``runs.execution``) rebuilds the plan from them (:func:`planned`) instead of
planning again. Its own module because both use it and neither may import the other.
"""

from __future__ import annotations

from typing import Any

from forklab.engine.fork import ForkPlan, prepare_fork
from forklab.engine.fork.core import plan_from_inputs
from forklab.runs import bases
from forklab.runs.engine_env import build_environment
from forklab.runs.models import Project, Run
from forklab.runs.specs import ForkSpec
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


def planned(spec: ForkSpec, project: Project, base: Run | None,
            inputs: dict[str, Any] | None) -> ForkPlan:
    """The plan the request path made, for the worker: rebuilt from its stored ``inputs``
    (nothing resolved or estimated again; the base from the per-process cache). A row queued
    without them (before they were stored) is planned again from its request."""
    if inputs is None or base is None:
        return plan_for(spec, project, base)
    env = build_environment()
    return plan_from_inputs(bases.loaded(base, env), inputs, policy=spec.policy,
                            budget=spec.budget, graph_version=spec.graph_version)
