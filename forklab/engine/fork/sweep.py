"""Sweeps: one fork per named variant from the same point (SPEC §3.6).

Every variant forks the same base at the same point, so only the change separates them.
Variants run on a thread pool (``concurrency``, default 4); a variant that raises is recorded
on its own entry and the others go on. With ``memoize``, executions one variant records are
offered to the others (``SharedMemo``), so a suffix the changes cannot reach is paid once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.environment import Environment
from forklab.engine.errors import ForklabError
from forklab.engine.events import Event
from forklab.engine.fork.core import BaseRun, load_base, prepare_fork, run_plan
from forklab.engine.fork.result import ForkResult, result_of
from forklab.engine.fork.tail import Policy, SharedMemo
from forklab.engine.recording import RecordedRun
from forklab.engine.store import Store


@dataclass
class SweepResult:
    fork_group_id: str
    results: dict[str, ForkResult] = field(default_factory=dict)
    errors: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def incurred_cost_usd(self) -> float | None:
        """Total spend of the variants; None when one of them called an unpriced model."""
        costs = [r.incurred_cost_usd for r in self.results.values()]
        if any(cost is None for cost in costs):
            return None
        return round(sum(cost or 0.0 for cost in costs), 10)

    def wire(self) -> dict[str, Any]:
        variants: dict[str, Any] = {}
        for name, result in self.results.items():
            variants[name] = {"status": result.state.status if result.state else None,
                              "run_id": result.run_id, **result.to_wire()}
        for name, error in self.errors.items():
            variants[name] = {"status": "error", "error": error}
        return {"fork_group_id": self.fork_group_id, "variants": variants,
                "incurred_cost_usd": self.incurred_cost_usd}


def _base(base: str | RecordedRun | BaseRun, store: Store | None,
          env: Environment | None) -> BaseRun:
    return base if isinstance(base, BaseRun) else load_base(base, store=store, env=env)


def fork_each(
    base: str | RecordedRun | BaseRun, *, at: Any, variants: Mapping[str, Any],
    concurrency: int = 4, policy: Policy | dict[str, Any] | None = None,
    budget: Any = None, ignore_budget: bool = False, fork_group_id: str | None = None,
    store: Store | None = None, env: Environment | None = None,
    on_event: Callable[[str, Event], None] | None = None,
    run_ids: Mapping[str, str] | None = None,
) -> SweepResult:
    """Fork ``base`` once per variant; results per variant plus total incurred spend."""
    base_run = _base(base, store, env)
    group = fork_group_id or uuid.uuid4().hex
    policy = Policy.parse(policy)
    shared = SharedMemo() if policy.memoize else None
    sweep = SweepResult(fork_group_id=group)

    def one(name: str) -> None:
        try:
            plan = prepare_fork(base_run, at=at, change=variants[name], policy=policy,
                                budget=budget, ignore_budget=ignore_budget)
            runner = run_plan(
                plan, run_id=(run_ids or {}).get(name), label=name, fork_group_id=group,
                ignore_budget=ignore_budget, shared_memo=shared,
                on_event=(lambda e: on_event(name, e)) if on_event else None)
            sweep.results[name] = result_of(plan, runner.state, run_id=runner.run_id,
                                            label=name, fork_group_id=group)
        except ForklabError as exc:
            sweep.errors[name] = exc.to_dict()
        except Exception as exc:  # a variant's bug must not sink the variants already paid for
            sweep.errors[name] = {"code": "variant_failed", "detail": f"{type(exc).__name__}: {exc}"}

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        list(pool.map(one, list(variants)))
    sweep.results = {n: sweep.results[n] for n in variants if n in sweep.results}
    return sweep


def estimate_sweep(
    base: str | RecordedRun | BaseRun, *, at: Any, variants: Mapping[str, Any],
    policy: Policy | dict[str, Any] | None = None, budget: Any = None,
    store: Store | None = None, env: Environment | None = None,
) -> dict[str, Any]:
    """Predict a sweep's spend without running anything.

    Raises the first variant's ForklabError (an unresolvable change, a bad point) before
    anything is spent.
    """
    base_run = _base(base, store, env)
    lines, per_variant, total = [], {}, 0.0
    for name, spec in variants.items():
        plan = prepare_fork(base_run, at=at, change=spec, policy=policy, budget=budget,
                            ignore_budget=True)
        est = plan.estimate
        total += est.cost_usd
        per_variant[name] = {**est.wire(), "warnings": plan.warnings}
        lines.append(f"{name}: {est.live_calls} live calls, {est.tokens} tokens, "
                     f"${est.cost_usd:.4f}")
    return {"cost_usd": round(total, 8), "lines": lines, "variants": per_variant}
