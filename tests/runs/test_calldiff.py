"""Two runs' tool loops aligned call by call (SPEC §6.5): pure, from folded states."""

from __future__ import annotations

from typing import Any

from forklab.engine.fork import fork
from forklab.engine.recording import run_recorded
from forklab.engine.scenarios import SCENARIOS
from forklab.runs.calldiff import CallFacts, align_calls, loop_calls, summary
from tests.engine.golden_tool import deterministic_env


def record(**input: Any) -> Any:
    scenario = SCENARIOS["support-agent"]
    return run_recorded(scenario.graph(), {**scenario.input, **input},
                        env=deterministic_env()).state


def ops(rows: list[Any]) -> list[tuple[str, str]]:
    return [(row.op, row.key) for row in rows]


def test_a_run_aligned_with_itself_is_the_same_call_for_call() -> None:
    state = record()
    rows = align_calls(loop_calls(state), loop_calls(state))
    assert ops(rows) == [("same", k) for k in (
        "assist#1/turn:1", "assist#1/turn:1/tool:1", "assist#1/turn:1/tool:2",
        "assist#1/turn:2", "assist#1/turn:2/tool:1", "assist#1/turn:3")]
    assert summary(rows) == []


def test_without_an_order_to_refund_the_refund_call_is_gone_and_the_answer_changed() -> None:
    base = record()
    variant = record(ticket="My order A-9999 arrived damaged. Please refund it.")
    rows = align_calls(loop_calls(base), loop_calls(variant))
    assert ops(rows) == [
        ("changed", "assist#1/turn:1"), ("changed", "assist#1/turn:1/tool:1"),
        ("changed", "assist#1/turn:1/tool:2"), ("changed", "assist#1/turn:2"),
        ("skipped", "assist#1/turn:2/tool:1"), ("skipped", "assist#1/turn:3")]
    refund = rows[4].base
    assert refund is not None and refund.tool == "issue_refund"
    assert rows[1].why == "arguments, result"
    assert "the issue_refund call (assist#1/turn:2/tool:1) is gone" in summary(rows)
    assert "the reply of assist#1/turn:2 changed" in summary(rows)


def test_a_fork_whose_second_turn_replies_instead_of_refunding_loses_the_refund_call() -> None:
    scenario = SCENARIOS["support-agent"]
    base = run_recorded(scenario.graph(), scenario.input, env=deterministic_env())
    variant = fork(base, at={"before_call": "assist#1/turn:2"}, change=[
        {"kind": "reply", "call": "assist#1/turn:2", "text": "No refund today."}])
    assert variant.state is not None
    rows = align_calls(loop_calls(base.state), loop_calls(variant.state))
    assert ops(rows) == [
        ("same", "assist#1/turn:1"), ("same", "assist#1/turn:1/tool:1"),
        ("same", "assist#1/turn:1/tool:2"), ("changed", "assist#1/turn:2"),
        ("skipped", "assist#1/turn:2/tool:1"), ("skipped", "assist#1/turn:3")]
    assert rows[3].variant is not None and rows[3].variant.text == "No refund today."
    assert summary(rows)[:2] == ["the reply of assist#1/turn:2 changed",
                                 "the issue_refund call (assist#1/turn:2/tool:1) is gone"]


def test_the_single_turn_closing_agent_is_no_loop_and_is_left_out() -> None:
    assert {f.execution for f in loop_calls(record())} == {"assist#1"}


def facts(key: str, *, outcome: Any = "ok", tool: str | None = None) -> CallFacts:
    return CallFacts(key=key, kind="tool" if "/tool:" in key else "turn", tool=tool,
                     outcome=outcome)


def test_calls_only_one_side_made_keep_their_place_between_the_common_ones() -> None:
    base = [facts("a#1/turn:1"), facts("a#1/turn:1/tool:1", tool="refund"),
            facts("a#1/turn:2")]
    variant = [facts("a#1/turn:1"), facts("a#1/turn:1/tool:1", tool="lookup"),
               facts("a#1/turn:1/tool:2", tool="search"), facts("a#1/turn:2", outcome="no")]
    rows = align_calls(base, variant)
    assert [(r.op, r.key, r.why) for r in rows] == [
        ("same", "a#1/turn:1", ""), ("changed", "a#1/turn:1/tool:1", "tool"),
        ("inserted", "a#1/turn:1/tool:2", ""), ("changed", "a#1/turn:2", "reply")]
    assert align_calls(base, [])[-1].op == "skipped" and align_calls([], base)[0].op == \
        "inserted"


def test_a_model_asked_from_inside_a_tool_aligns_as_an_ask_of_that_call() -> None:
    from tests.engine.agents.test_tool_asks import record as record_asks

    base, _ = record_asks()
    calls = loop_calls(base.state)
    assert [(f.key, f.kind) for f in calls][:4] == [
        ("assist#1/turn:1", "turn"), ("assist#1/turn:1/tool:1", "tool"),
        ("assist#1/turn:1/tool:1/ask:1", "ask"), ("assist#1/turn:1/tool:1/ask:2", "ask")]
    assert calls[2].text  # an ask's reply reads like a turn's
    changed = [CallFacts(key=f.key, kind=f.kind, tool=f.tool, sent=f.sent,
                         outcome={"text": "other"} if f.kind == "ask" else f.outcome)
               for f in calls]
    assert "the reply of assist#1/turn:1/tool:1/ask:1 changed" in summary(
        align_calls(calls, changed))
