"""Sweeps: one fork per named variant from the same point (SPEC §3.6).

Every variant forks the same base at the same point, so only the change separates them: a
sweep is planned once (:func:`plan_sweep`: the point resolved once, each variant applying its
change there, one fold of the prefix per effective point) and then run. Variants run on a
thread pool (``concurrency``, default 4); a variant that raises is recorded
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
from forklab.engine.fork.core import (
    BaseRun,
    ForkPlan,
    SharedPrefixes,
    load_base,
    plan_at,
    plan_imported,
    resolve_request,
    run_plan,
)
from forklab.engine.fork.onecall import imported_kind
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

    def failures(self) -> dict[str, str]:
        """Each variant that failed, with why: it could not be forked (its error's code), or
        its run ended ``failed`` (its error's code and node). In variant order."""
        found: dict[str, str] = {}
        for name, result in self.results.items():
            error = (result.state.error or {}) if result.state else {}
            if result.state is not None and result.state.status == "failed":
                where = f" at node {error['node']!r}" if error.get("node") else ""
                found[name] = f"its run failed{where} ({error.get('code', 'failed')})"
        for name, error in self.errors.items():
            found[name] = f"not forked ({error['code']})"
        return found

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


@dataclass
class SweepPlan:
    """A sweep planned once: the point resolved once in the base, then each variant's plan
    at it (its changes validated, its effective point found, its tail estimated); variants
    whose effective point is the same share one fold of the prefix (``prefixes``).
    ``errors`` holds, per variant, what made it impossible to plan."""

    base: BaseRun
    plans: dict[str, ForkPlan] = field(default_factory=dict)
    errors: dict[str, Exception] = field(default_factory=dict)
    prefixes: SharedPrefixes = field(default_factory=SharedPrefixes)

    def raise_first(self) -> None:
        """Raise the first variant's error (in variant order), if any."""
        if self.errors:
            raise next(iter(self.errors.values()))


def plan_sweep(
    base: str | RecordedRun | BaseRun, *, at: Any, variants: Mapping[str, Any],
    policy: Policy | dict[str, Any] | None = None, budget: Any = None,
    ignore_budget: bool = False, store: Store | None = None, env: Environment | None = None,
) -> SweepPlan:
    """Plan every variant of a sweep without running anything: the point is resolved once
    (an unresolvable point is every variant's error), each variant applies its own change
    there. Never raises a variant's ForklabError: see :meth:`SweepPlan.raise_first`."""
    sweep = SweepPlan(base=_base(base, store, env))
    if imported_kind(sweep.base) == "one_call":  # each variant re-asks the one call
        for name, change in variants.items():
            try:
                sweep.plans[name] = plan_imported(
                    sweep.base, at=at, change=change, policy=policy, budget=budget,
                    ignore_budget=ignore_budget, prefixes=sweep.prefixes)
            except Exception as exc:  # a variant's bug must not sink the other variants
                sweep.errors[name] = exc
        return sweep
    try:
        resolved = resolve_request(sweep.base, at=at)
    except ForklabError as exc:
        sweep.errors = dict.fromkeys(variants, exc)
        return sweep
    for name, change in variants.items():
        try:
            sweep.plans[name] = plan_at(sweep.base, resolved, change=change, policy=policy,
                                        budget=budget, ignore_budget=ignore_budget,
                                        prefixes=sweep.prefixes)
        except Exception as exc:  # a variant's bug must not sink the other variants
            sweep.errors[name] = exc
    return sweep


def _error(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, ForklabError):
        return exc.to_dict()
    return {"code": "variant_failed", "detail": f"{type(exc).__name__}: {exc}"}


def run_sweep(
    planned: SweepPlan, *, concurrency: int = 4, ignore_budget: bool = False,
    fork_group_id: str | None = None, on_event: Callable[[str, Event], None] | None = None,
    run_ids: Mapping[str, str] | None = None, store: Store | None = None,
) -> SweepResult:
    """Run a planned sweep's variants on a thread pool (``concurrency``); a variant that
    raises is recorded on its own entry and the others go on. With ``memoize``, executions
    one variant records are offered to the others (one ``SharedMemo``)."""
    group = fork_group_id or uuid.uuid4().hex
    memoize = any(plan.policy.memoize for plan in planned.plans.values())
    shared = SharedMemo() if memoize else None
    sweep = SweepResult(fork_group_id=group,
                        errors={n: _error(e) for n, e in planned.errors.items()})

    def one(name: str) -> None:
        plan = planned.plans[name]
        try:
            runner = run_plan(
                plan, run_id=(run_ids or {}).get(name), label=name, fork_group_id=group,
                ignore_budget=ignore_budget, shared_memo=shared, store=store,
                on_event=(lambda e: on_event(name, e)) if on_event else None)
            sweep.results[name] = result_of(plan, runner.state, run_id=runner.run_id,
                                            label=name, fork_group_id=group)
        except Exception as exc:  # a variant's bug must not sink the variants already paid for
            sweep.errors[name] = _error(exc)

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        list(pool.map(one, list(planned.plans)))
    sweep.results = {n: sweep.results[n] for n in planned.plans if n in sweep.results}
    return sweep


def fork_each(
    base: str | RecordedRun | BaseRun, *, at: Any, variants: Mapping[str, Any],
    concurrency: int = 4, policy: Policy | dict[str, Any] | None = None,
    budget: Any = None, ignore_budget: bool = False, fork_group_id: str | None = None,
    store: Store | None = None, env: Environment | None = None,
    on_event: Callable[[str, Event], None] | None = None,
    run_ids: Mapping[str, str] | None = None,
) -> SweepResult:
    """Fork ``base`` once per variant; results per variant plus total incurred spend.

    Planned once (:func:`plan_sweep`: one point resolution, one prefix fold per effective
    point), then run (:func:`run_sweep`)."""
    planned = plan_sweep(base, at=at, variants=variants, policy=policy, budget=budget,
                         ignore_budget=ignore_budget, store=store, env=env)
    return run_sweep(planned, concurrency=concurrency, ignore_budget=ignore_budget,
                     fork_group_id=fork_group_id, on_event=on_event, run_ids=run_ids)


def estimate_sweep(
    base: str | RecordedRun | BaseRun, *, at: Any, variants: Mapping[str, Any],
    policy: Policy | dict[str, Any] | None = None, budget: Any = None,
    store: Store | None = None, env: Environment | None = None,
) -> dict[str, Any]:
    """Predict a sweep's spend without running anything.

    Raises the first variant's ForklabError (an unresolvable change, a bad point) before
    anything is spent.
    """
    planned = plan_sweep(base, at=at, variants=variants, policy=policy, budget=budget,
                         ignore_budget=True, store=store, env=env)
    planned.raise_first()
    lines, per_variant, total = [], {}, 0.0
    for name, plan in planned.plans.items():
        est = plan.estimate
        total += est.cost_usd
        per_variant[name] = {**est.wire(), "warnings": plan.warnings}
        lines.append(f"{name}: {est.live_calls} live calls, {est.tokens} tokens, "
                     f"${est.cost_usd:.4f}")
    return {"cost_usd": round(total, 8), "lines": lines, "variants": per_variant}
