"""Every call of a fork's tail is accounted (issue 8 point 7).

A call that raised is listed and counted; each role of a multi-agent node is labelled by its
own cause; the estimate counts the writes the policy allows; the cost cap is checked before
each call against its worst case; an unpriced call is reported as unpriced, never as $0.
"""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import change, fork, prepare_fork
from forklab.engine.errors import ProviderError
from forklab.engine.fork.core import run_plan
from forklab.engine.graph import parse_graph
from forklab.engine.providers import ChatRequest, ChatResponse, ProviderRegistry
from forklab.engine.recording import run_recorded
from tests.engine.fork.helpers import labels, make_env, record, world

# -- failed calls ------------------------------------------------------------------------------


def test_a_live_tool_call_that_raised_is_listed_in_calls_and_counted() -> None:
    base = record("flaky-tool")

    plan = prepare_fork(base, at="failure")
    runner = run_plan(plan)

    state = runner.state
    assert state.status == "failed"
    tail = state.calls[state.tail_from_call:]
    assert [(c.node, c.kind, c.label) for c in tail] == [("fetch_inventory", "tool", "live")]
    assert runner.oracle.spend.live_calls == 1


class _Failing:
    name = "scripted"

    def complete(self, request: ChatRequest) -> ChatResponse:
        raise ProviderError("upstream model is down (HTTP 503)")


def test_a_provider_error_is_a_listed_call_of_its_role() -> None:
    base = record("research-write")
    base.env.providers = ProviderRegistry({"scripted": _Failing()})

    result = fork(base, at={"before_node": "write"}, change=change.prompt("write", "Terse."))

    assert result.state.status == "failed"
    assert result.state.error["type"] == "provider_error"
    assert result.calls == [{"seq": 6, "node": "write", "occurrence": 1, "role": None,
                             "kind": "agent", "label": "changed", "model": "scripted-large",
                             "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0,
                             "call": "write#1/turn:1"}]


# -- labels ------------------------------------------------------------------------------------


def _vote_labels(result: Any) -> list[tuple[str, str]]:
    return [(c["role"], c["label"]) for c in result.calls if c["node"] == "vote"]


def test_each_role_of_a_multi_agent_node_is_labelled_by_its_own_cause() -> None:
    base = record("panel-vote")

    result = fork(base, at="start", change=change.model("vote.voters[1]", "scripted-large"))

    voters = _vote_labels(result)[:3]
    assert voters == [("voters[0]", "live"), ("voters[1]", "changed"), ("voters[2]", "live")]


def test_with_memoize_the_unchanged_roles_of_an_executing_node_are_served_from_the_recording(
) -> None:
    base = record("panel-vote")

    result = fork(base, at="start", change=change.model("vote.voters[1]", "scripted-large"),
                  policy={"memoize": True})

    assert _vote_labels(result)[:3] == [
        ("voters[0]", "reused"), ("voters[1]", "changed"), ("voters[2]", "reused")]
    assert {"node": "vote", "occurrence": 1} not in result.memo_hits


def test_a_call_whose_request_changed_downstream_is_changed_not_live() -> None:
    base = record("research-write")

    result = fork(base, at="start", change=change.prompt("research", "List three facts."))

    assert labels(result.calls) == [("research", "agent", "changed"),
                                    ("write", "agent", "changed")]


# -- estimate ----------------------------------------------------------------------------------


def test_the_estimate_counts_the_writes_the_policy_allows() -> None:
    base = record("order-fulfilment")

    blocked = prepare_fork(base, at="start", change=change.input_patch({"coupon": None}))
    allowed = prepare_fork(base, at="start", change=change.input_patch({"coupon": None}),
                           policy={"side_effects": {"allow": ["charge"]}})

    assert blocked.estimate.live_calls == 1  # lookup_price
    assert allowed.estimate.live_calls == 2  # and the charge it may really make


# -- the cost cap ------------------------------------------------------------------------------

LONG = {
    "id": "long", "start": "a",
    "nodes": [{"id": "a", "kind": "agent", "reads": ["x"], "writes": ["out"], "prompt": "{x}",
               "agent": {"model": "scripted-large", "max_tokens": 4000}}],
}


def test_the_cost_cap_is_checked_against_the_next_calls_worst_case() -> None:
    base = run_recorded(parse_graph(LONG), {"x": "hello"}, env=make_env())
    estimate = prepare_fork(base, at="start", change=change.memory(set={"x": "bye"})).estimate
    cap = estimate.cost_usd * 2  # the recording fits; 4000 output tokens would not

    result = fork(base, at="start", change=change.memory(set={"x": "bye"}),
                  budget={"max_cost_usd": cap})

    assert result.state.status == "failed"
    assert result.state.error["code"] == "live_budget_exceeded"
    assert "may cost up to" in result.state.error["message"]
    assert result.calls == []
    assert result.incurred_cost_usd <= cap


@pytest.mark.parametrize("ignore_budget", [False, True])
def test_a_worst_case_is_worked_out_only_under_an_enforced_budget(ignore_budget: bool) -> None:
    from forklab.engine.oracle import NodeCall

    base = run_recorded(parse_graph(LONG), {"x": "hello"}, env=make_env())
    plan = prepare_fork(base, at="start", change=change.memory(set={"x": "bye"}),
                        budget={"max_cost_usd": 1.0}, ignore_budget=ignore_budget)
    oracle = run_plan(plan, ignore_budget=ignore_budget).oracle
    node = plan.graph.node("a")
    call = NodeCall(node="a", kind="agent", occurrence=1, iteration=1, fingerprint="new",
                    reads={"x": "bye"})

    calls, usd = oracle.worst_case(plan.graph, node, call)

    # enforced: the scheduler reserves one call's most; not enforced: nothing is reserved
    if ignore_budget:
        assert (calls, usd) == (0, 0.0)
    else:
        assert calls == 1 and usd is not None and usd > 0


# -- unpriced models ---------------------------------------------------------------------------

BRANCH = {
    "id": "branch", "start": "r",
    "nodes": [
        {"id": "r", "kind": "router", "reads": ["x"], "default": "end",
         "rules": [{"when": [{"key": "x", "value": 1}], "to": "b"}]},
        {"id": "b", "kind": "agent", "agent": {"model": "mystery-1"}, "reads": ["x"],
         "writes": ["out"], "prompt": "{x}"},
    ],
}


@pytest.mark.parametrize("ignore_budget", [False, True])
def test_an_unpriced_call_the_estimate_did_not_foresee_is_refused_under_a_cost_cap(
    ignore_budget: bool,
) -> None:
    base = run_recorded(parse_graph(BRANCH), {"x": 0}, env=make_env())

    result = fork(base, at="start", change=change.memory(set={"x": 1}),
                  ignore_budget=ignore_budget)

    assert result.state.status == "failed"
    assert result.state.error["code"] == "unpriced_model"
    assert "'mystery-1'" in result.state.error["message"]
    assert result.calls == []


def test_an_unpriced_call_is_reported_as_unpriced_never_as_zero() -> None:
    base = run_recorded(parse_graph(BRANCH), {"x": 0}, env=make_env())

    result = fork(base, at="start", change=change.memory(set={"x": 1}),
                  budget={"max_cost_usd": None})

    (call,) = result.calls
    assert (call["model"], call["label"], call["cost_usd"]) == ("mystery-1", "live", None)
    assert result.unpriced_calls == 1
    assert result.to_wire()["unpriced_calls"] == 1
    assert "1 live call(s) to a model with no price" in result.explain()


@pytest.mark.parametrize("allow", [False, True])
def test_a_default_fork_never_writes_and_an_allowed_one_counts_its_write(allow: bool) -> None:
    base = record("order-fulfilment")
    before = world()
    policy = {"side_effects": {"allow": ["charge"]}} if allow else {}

    plan = prepare_fork(base, at="start", change=change.input_patch({"coupon": None}),
                        policy=policy)
    runner = run_plan(plan, hitl=lambda request: None)

    assert world()["charge"] == before["charge"] + (1 if allow else 0)
    assert runner.oracle.spend.live_calls == plan.estimate.live_calls


class _Refusing:
    name = "scripted"

    def complete(self, request: ChatRequest) -> ChatResponse:
        raise ProviderError("https://api.example/v1 answered HTTP 429: slow down",
                            url="https://api.example/v1", status=429,
                            provider_message="slow down",
                            attempts=[{"status": 429, "error": "slow down"}])


def test_a_provider_errors_status_and_attempts_are_kept_on_the_failed_call() -> None:
    base = record("research-write")
    base.env.providers = ProviderRegistry({"scripted": _Refusing()})

    result = fork(base, at={"before_node": "write"}, change=change.prompt("write", "Terse."))

    failed = next(e for e in result.event_log if e.TYPE == "call.failed")
    assert failed.error == {
        "type": "provider_error", "message": "https://api.example/v1 answered HTTP 429: slow down",
        "url": "https://api.example/v1", "status": 429, "provider_message": "slow down",
        "attempts": [{"status": 429, "error": "slow down"}]}
    assert result.state.error is not None and result.state.error["status"] == 429
