"""Fidelity (SPEC §3.7): a fork that changes nothing, with memoization on, makes no model or
tool calls and reproduces the base run's final outcome exactly.

``fork_check`` null-forks every fork point of a run and reports each mismatch with the diff.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forklab.engine.canonical import canonical_equals
from forklab.engine.environment import Environment
from forklab.engine.fork.core import load_base, prepare_fork, run_plan
from forklab.engine.fork.diff import diff_runs, format_run_diff
from forklab.engine.fork.points import ForkPoint
from forklab.engine.store import MemoryStore, Store


@dataclass
class FidelityResult:
    run_id: str
    point: ForkPoint
    ok: bool
    calls: int
    detail: str = ""

    def wire(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "point": self.point.to_wire(), "ok": self.ok,
                "calls": self.calls, "detail": self.detail}


def fork_check(run_id: str, *, store: Store, env: Environment | None = None,
               scratch: Store | None = None) -> list[FidelityResult]:
    """Null-fork every point of ``run_id``; variants go to ``scratch`` (memory by default)."""
    base = load_base(run_id, store=store, env=env)
    results = []
    for point in base.index.points():
        plan = prepare_fork(base, at={"sequence": point.seq}, policy={"memoize": True},
                            ignore_budget=True)
        runner = run_plan(plan, store=scratch or MemoryStore(), ignore_budget=True)
        state = runner.state
        start = (state.fork or {}).get("tail_from_call", 0)
        paid = [c for c in state.calls[start:] if c.label not in ("reused",)]
        same = canonical_equals(state.outcome(), base.state.outcome())
        detail = ""
        if paid or not same:
            detail = format_run_diff(diff_runs(base.state, state),
                                     f"null fork at seq {point.seq} ({point.label})")
            if paid:
                detail += f"\n  calls     {len(paid)} paid call(s): " + ", ".join(
                    f"{c.node}:{c.kind}:{c.label}" for c in paid)
        results.append(FidelityResult(run_id=run_id, point=point, ok=same and not paid,
                                      calls=len(paid), detail=detail))
    return results
