"""Planning a fork request: the engine's ``ForkPlan`` for a validated ``ForkSpec``.

Its own module because both the request path (``runs.forking``) and the worker
(``runs.execution``) plan, and neither may import the other (no import cycles).
"""

from __future__ import annotations

from typing import Any

from forklab.engine.fork import ForkPlan, prepare_fork
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
