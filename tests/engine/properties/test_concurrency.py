"""Parallel branches leave no trace in the log (docs/forking.md "Parallel branches").

A run and a fork of it, recorded with ``max_concurrency`` 1 and with N, write the same log
byte for byte (the fixed clock is logical: stamped in log order) — including runs that fail,
pause, block, and forks under an enforced budget — and nothing that happens outside the log
(a write tool's effect) happens more often.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points
from forklab.engine.canonical import canonical_json
from forklab.engine.errors import LiveBudgetExceeded
from tests.engine.properties.changes import changes
from tests.engine.properties.graphs import Options, graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import Harness, hitl

WIDE = Options(segments=("diamond", "branch", "diamond", "single", "loop", "fan", "fan"),
               min_segments=2)
"""Mostly fan-outs: where nodes really run at once."""


def _log(events: Any) -> list[str]:
    return [canonical_json(e.to_wire()) for e in events]


def _record_and_fork(case: Any, width: int, choice: dict[str, Any]) -> dict[str, Any]:
    h = Harness()
    h.env.max_concurrency = width
    base = record_case(case, h)
    points = fork_points(base.event_log)
    out: dict[str, Any] = {"run": _log(base.event_log), "sent": len(h.world.sent)}
    if not points:
        return out
    try:
        result = fork(base, at={"sequence": points[choice["point"] % len(points)].seq},
                      change=choice["change"], policy=choice["policy"], hitl=hitl,
                      budget=choice["budget"], ignore_budget=choice["budget"] is None)
    except LiveBudgetExceeded as exc:  # refused up front: the same either way
        out["fork"] = exc.code
    else:
        out["fork"] = _log(result.event_log)
    out["sent_after_fork"] = len(h.world.sent)
    return out


@examples(60)
@given(case=st.one_of(graph_cases(WIDE), graph_cases()), data=st.data())
def test_a_run_and_its_fork_log_the_same_events_for_max_concurrency_1_and_n(
        case: Any, data: st.DataObject) -> None:
    width = data.draw(st.sampled_from([2, 3, 16]), label="max_concurrency")
    probe = record_case(case, Harness())
    choice = {
        "point": data.draw(st.integers(0, 1_000), label="point"),
        "change": data.draw(st.one_of(st.none(), changes(case.graph, probe.state)),
                            label="change"),
        "policy": {"memoize": data.draw(st.booleans(), label="memoize"),
                   "side_effects": data.draw(st.sampled_from(["replay", {"allow": True}]),
                                             label="side_effects")},
        "budget": data.draw(st.sampled_from([
            None, {"max_live_calls": 2, "max_cost_usd": None},
            {"max_live_calls": 3, "max_cost_usd": 0.0005}, {}]), label="budget"),
    }

    sequential = _record_and_fork(case, 1, choice)
    concurrent = _record_and_fork(case, width, choice)

    assert concurrent["run"] == sequential["run"], _first_difference(
        sequential["run"], concurrent["run"])
    assert concurrent.get("fork") == sequential.get("fork"), _first_difference(
        sequential.get("fork") or [], concurrent.get("fork") or [])
    assert concurrent["sent"] == sequential["sent"]
    assert concurrent.get("sent_after_fork") == sequential.get("sent_after_fork")


def _first_difference(a: list[str], b: list[str]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"event #{i + 1} differs:\n  max_concurrency 1: {x}\n  max_concurrency N: {y}"
    return f"{len(a)} events with max_concurrency 1, {len(b)} with N"
