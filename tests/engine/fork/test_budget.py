"""Budgets and estimates (SPEC §3.4): predicted before anything runs, enforced while it runs."""

from __future__ import annotations

import pytest

from forklab.engine import change, fork, parse_graph, prepare_fork
from forklab.engine.errors import LiveBudgetExceeded, UnpricedModel
from forklab.engine.providers import PriceTable
from forklab.engine.recording import run_recorded
from tests.engine.fork.helpers import Counter, make_env, record


def _write_execution(base):
    return next(e for e in base.state.executions if e.node == "write")


def test_the_estimate_prices_the_changed_node_at_its_recorded_tokens() -> None:
    base = record("research-write")
    write = _write_execution(base)

    result = fork(base, at={"before_node": "write"}, change=change.prompt("write", "x"),
                  dry_run=True)

    tokens = write.input_tokens + write.output_tokens
    expected = PriceTable().cost("scripted-large", write.input_tokens, write.output_tokens)
    assert result.estimate.wire() == {"live_calls": 1, "tokens": tokens, "cost_usd": expected}


def test_the_estimate_prices_a_model_change_under_the_new_model() -> None:
    base = record("research-write")
    write = _write_execution(base)

    plan = prepare_fork(base, at={"before_node": "write"},
                        change=change.model("write", "scripted-small"))

    assert plan.estimate.cost_usd == PriceTable().cost(
        "scripted-small", write.input_tokens, write.output_tokens)


@pytest.mark.parametrize(("memoize", "live_calls"), [(False, 2), (True, 1)])
def test_with_memoize_the_estimate_counts_only_nodes_the_change_reaches(memoize: bool,
                                                                        live_calls: int) -> None:
    plan = prepare_fork(record("research-write"), at="start",
                        change=change.prompt("write", "x"), policy={"memoize": memoize})
    assert plan.estimate.live_calls == live_calls


def test_the_estimate_of_a_memoized_diamond_branch_counts_the_branch_and_the_join() -> None:
    plan = prepare_fork(record("diamond"), at="start", change=change.prompt("left", "x"),
                        policy={"memoize": True})
    assert plan.estimate.live_calls == 2


def test_the_estimate_matches_what_the_tail_then_spends() -> None:
    base = record("diamond")

    result = fork(base, at="start", change=change.model("left", "scripted-large"),
                  policy={"memoize": True})

    paid = [c for c in result.calls if c["label"] in ("live", "changed")]
    assert result.estimate.live_calls == len(paid) == 2


def test_a_fork_estimated_over_max_live_calls_is_refused_before_anything_runs() -> None:
    counter = Counter()
    base = record("review-loop", counter=counter)
    counter.reset()
    runs = base.store.run_ids()

    with pytest.raises(LiveBudgetExceeded) as raised:
        fork(base, at="start", change=change.model("draft", "scripted-large"),
             budget={"max_live_calls": 3})

    assert raised.value.code == "live_budget_exceeded"
    assert raised.value.context["estimate"]["live_calls"] > 3
    assert "budget is 3" in raised.value.message
    assert base.store.run_ids() == runs
    assert counter.model_calls == []


def test_a_fork_estimated_over_max_cost_is_refused() -> None:
    with pytest.raises(LiveBudgetExceeded) as raised:
        prepare_fork(record("research-write"), at={"before_node": "write"},
                     change=change.prompt("write", "x"), budget={"max_cost_usd": 0.000001})
    assert "$0.0000" in raised.value.message


def test_ignore_budget_proceeds_past_the_estimate() -> None:
    base = record("review-loop")

    result = fork(base, at="start", change=change.model("draft", "scripted-large"),
                  budget={"max_live_calls": 3}, ignore_budget=True)

    assert result.state.status == "completed"
    assert len([c for c in result.calls if c["label"] in ("live", "changed")]) > 3


def test_the_default_budget_is_fifty_calls_and_one_dollar() -> None:
    plan = prepare_fork(record("research-write"), at="start")
    assert plan.budget.wire() == {"max_live_calls": 50, "max_cost_usd": 1.0}


def test_an_unpriced_model_under_a_cost_budget_is_refused_up_front() -> None:
    base = record("research-write")

    with pytest.raises(UnpricedModel) as raised:
        fork(base, at={"before_node": "write"}, change=change.model("write", "mystery-1"))

    assert raised.value.code == "unpriced_model"
    assert raised.value.context["models"] == ["mystery-1"]
    assert len(base.store.run_ids()) == 1


def test_an_unpriced_model_runs_when_there_is_no_cost_budget() -> None:
    base = record("research-write")

    result = fork(base, at={"before_node": "write"}, change=change.model("write", "mystery-1"),
                  budget={"max_live_calls": 5, "max_cost_usd": None})

    assert result.state.status == "completed"
    assert result.estimate.unpriced_models == ["mystery-1"]
    assert result.calls[0]["model"] == "mystery-1"
    assert result.calls[0]["cost_usd"] is None
    assert result.state.unpriced_calls == 1


def test_ignore_budget_does_not_waive_the_unpriced_model_refusal() -> None:
    with pytest.raises(UnpricedModel):
        prepare_fork(record("research-write"), at={"before_node": "write"},
                     change=change.model("write", "mystery-1"), ignore_budget=True)


BRANCHY = {
    "id": "branchy", "start": "a",
    "nodes": [
        {"id": "a", "kind": "agent", "agent": {"model": "scripted-small"}, "reads": ["x"],
         "writes": ["out"], "prompt": "x={x}"},
        {"id": "r", "kind": "router", "reads": ["x"], "default": "end",
         "rules": [{"when": [{"key": "x", "value": 1}], "to": "b"}]},
        {"id": "b", "kind": "agent", "agent": {"model": "scripted-small"}, "reads": ["out"],
         "writes": ["extra"], "prompt": "{out}"},
    ],
    "edges": [{"from": "a", "to": "r"}],
}


def test_a_tail_that_outgrows_its_estimate_stops_with_live_budget_exceeded() -> None:
    base = run_recorded(parse_graph(BRANCHY), {"x": 0}, env=make_env())
    assert [e.node for e in base.state.executions] == ["a", "r"]

    result = fork(base, at={"before_node": "r"}, change=change.memory(set={"x": 1}),
                  budget={"max_live_calls": 0})

    assert result.estimate.live_calls == 0
    assert result.state.status == "failed"
    assert result.state.error["code"] == "live_budget_exceeded"
    assert result.state.error["node"] == "b"
    assert result.calls == []


def test_a_dry_run_estimates_and_writes_nothing() -> None:
    counter = Counter()
    base = record("research-write", counter=counter)
    counter.reset()
    runs = base.store.run_ids()

    result = fork(base, at={"before_node": "write"}, change=change.prompt("write", "x"),
                  dry_run=True)

    assert result.state is None and result.run_id is None and result.diff is None
    assert result.event_log == []
    assert result.calls == [] and result.memo_hits == [] and result.incurred_cost_usd == 0.0
    assert base.store.run_ids() == runs
    assert counter.model_calls == []
    assert result.estimate.live_calls == 1
    text = result.explain()
    assert text.startswith(f"fork (dry run) of {base.run_id} at seq 6")
    assert "  estimate  1 live calls" in text


def test_a_route_change_warns_that_the_new_branch_is_not_estimated() -> None:
    plan = prepare_fork(record("triage-router"), at="start", change=change.route("route", "escalate"))
    assert any("branch the base never took" in w for w in plan.warnings)
    assert plan.preflight()["effective_fork_sequence_id"] == 1
    assert plan.preflight()["events_reused"] == 1
