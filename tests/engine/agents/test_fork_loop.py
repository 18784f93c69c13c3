"""Forking a tool loop at any turn, tool call or reply (SPEC §6.2, §6.3).

The base is the support agent: lookup_order (read), issue_refund (write), an answer, and a
closing agent continuing the conversation. The model follows the conversation, so a changed
result or reply really changes what happens next; it counts every request it answers.
"""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import change, fork, fork_points
from forklab.engine.canonical import canonical_equals
from forklab.engine.errors import ForkPointNotFound, InvalidChange
from forklab.engine.fork.resolve import parse_point
from forklab.engine.recording import RecordedRun, run_recorded
from tests.engine.agents.helpers import TICKET, FollowingModel, env_with, refunds, support_graph

ALLOW_REFUND = {"side_effects": {"allow": ["issue_refund"]}}


@pytest.fixture
def world() -> tuple[RecordedRun, FollowingModel]:
    model = FollowingModel()
    base = run_recorded(support_graph(), dict(TICKET), env=env_with(model))
    assert base.state.status == "completed"
    model.requests.clear()
    return base, model


def labels(result: Any) -> list[tuple[str | None, str]]:
    return [(c["call"], c["label"]) for c in result.calls]


def test_fork_points_stand_before_every_turn_and_every_tool_call(world: Any) -> None:
    base, _ = world
    points = fork_points(base.event_log)
    calls = [p.call for p in points if p.kind == "before_call"]
    assert calls == ["assist#1/turn:1/tool:1", "assist#1/turn:2", "assist#1/turn:2/tool:1",
                     "assist#1/turn:3"]
    first = next(p for p in points if p.call == "assist#1/turn:2")
    assert first.label.startswith("before call 'assist#1/turn:2' (inside 'assist' execution 1")
    assert first.address() == {"before_call": "assist#1/turn:2"}


def test_a_null_fork_at_every_point_makes_no_call_and_reproduces_the_run(world: Any) -> None:
    base, model = world
    before = refunds()
    for point in fork_points(base.event_log):
        result = fork(base, at=point.address(), policy={"memoize": True})
        assert result.state.status == "completed", point.label
        assert canonical_equals(result.state.memory, base.state.memory), point.label
    assert model.requests == []
    assert refunds() == before


def test_without_memo_a_fork_at_a_turn_pays_only_that_turn_and_what_follows(world: Any) -> None:
    base, model = world
    before = refunds()
    result = fork(base, at={"before_call": "assist#1/turn:3"})
    assert canonical_equals(result.state.memory, base.state.memory)
    assert [len(r.messages) for r in model.requests] == [5, 7]  # turn 3, then the closer
    assert labels(result)[:5] == [
        ("assist#1/turn:1", "reused"), ("assist#1/turn:1/tool:1", "reused"),
        ("assist#1/turn:2", "reused"), ("assist#1/turn:2/tool:1", "reused"),
        ("assist#1/turn:3", "live")]
    assert refunds() == before


def test_a_reply_change_replaces_the_turn_and_the_loop_goes_on_from_it(world: Any) -> None:
    base, model = world
    before = refunds()
    result = fork(base, change=change.reply("assist#1/turn:2", text="No refund is due."))
    assert result.fork_sequence_id == result.point.seq
    assert result.point.call == "assist#1/turn:2"
    assert result.state.memory["answer"] == "No refund is due."
    assert refunds() == before
    assert labels(result)[:3] == [("assist#1/turn:1", "reused"),
                                  ("assist#1/turn:1/tool:1", "reused"),
                                  ("assist#1/turn:2", "simulated")]
    assert not any(c["call"] == "assist#1/turn:2/tool:1" for c in result.calls)
    assert len(model.requests) == 1  # only the closer ran


def test_a_replaced_tool_result_changes_what_the_model_does_next(world: Any) -> None:
    base, _ = world
    before = refunds()
    result = fork(base, change=change.tool_result(
        "assist#1/turn:1/tool:1", {"order_id": "A-1001", "found": False}))
    assert result.state.status == "completed"
    assert result.state.memory["answer"] == "Order A-1001 is unknown."
    assert refunds() == before
    assert labels(result)[:3] == [("assist#1/turn:1", "reused"),
                                  ("assist#1/turn:1/tool:1", "simulated"),
                                  ("assist#1/turn:2", "changed")]


def test_a_refund_the_base_never_made_is_blocked_unless_allowed(world: Any) -> None:
    base, _ = world
    before = refunds()
    other = change.reply("assist#1/turn:2", tool_calls=[
        {"name": "issue_refund", "arguments": {"order_id": "A-1001", "amount": 1.0}}])
    blocked = fork(base, change=other)
    assert blocked.state.status == "blocked"
    [suppressed] = blocked.suppressed_effects
    assert suppressed["inputs"]["tool"] == "issue_refund"
    assert suppressed["inputs"]["args"] == {"order_id": "A-1001", "amount": 1.0}
    assert refunds() == before
    allowed = fork(base, change=other, policy=ALLOW_REFUND)
    assert allowed.state.status == "completed"
    assert refunds() == before + 1
    # it ran for real, with other arguments than the base's call at that key
    assert ("assist#1/turn:2/tool:1", "changed") in labels(allowed)


def test_the_same_refund_asked_again_is_served_from_the_recording(world: Any) -> None:
    base, _ = world
    before = refunds()
    result = fork(base, at={"before_node": "assist"},
                  change=change.prompt("assist", "You are terse."))
    assert result.state.status == "completed"
    assert refunds() == before  # same order, same amount: the recorded refund is served
    assert ("assist#1/turn:2/tool:1", "reused") in labels(result)
    assert result.state.memory["answer"].endswith("Tone: You are terse.")


def test_rerun_makes_a_call_the_fork_would_serve_run_live(world: Any) -> None:
    base, model = world
    result = fork(base, change=change.rerun("assist#1/turn:3"), policy={"memoize": True})
    assert labels(result)[:5] == [
        ("assist#1/turn:1", "reused"), ("assist#1/turn:1/tool:1", "reused"),
        ("assist#1/turn:2", "reused"), ("assist#1/turn:2/tool:1", "reused"),
        ("assist#1/turn:3", "live")]
    assert len(model.requests) == 1  # the closer is served: its request did not change


def test_a_per_call_model_change_touches_that_call_only(world: Any) -> None:
    base, model = world
    result = fork(base, change=change.model("assist#1/turn:3", "scripted-large"))
    assert [r.model for r in model.requests] == ["scripted-large", "scripted-small"]
    assert ("assist#1/turn:3", "changed") in labels(result)


def test_a_tools_change_takes_a_tool_away_from_the_agent(world: Any) -> None:
    base, _ = world
    before = refunds()
    result = fork(base, at="start", change=change.tools("assist", remove=["issue_refund"]))
    assert result.state.memory["answer"] == "Order A-1001 is delivered damaged."
    assert refunds() == before


def test_a_call_key_that_names_no_call_lists_the_calls_of_that_execution(world: Any) -> None:
    base, _ = world
    with pytest.raises(ForkPointNotFound) as info:
        fork(base, at={"before_call": "assist#1/turn:9"})
    assert "turn:1/tool:1" in info.value.message and "turn:3" in info.value.message


def test_a_provider_call_id_is_an_alias_of_its_tool_call(world: Any) -> None:
    base, _ = world
    result = fork(base, at={"before_call": "assist#1/tool:call_2_1"},
                  policy={"memoize": True})
    assert result.point.call == "assist#1/turn:2/tool:1"


def test_the_cli_form_of_a_call_point() -> None:
    assert parse_point("before:assist#1/turn:3") == {"before_call": "assist#1/turn:3"}
    assert parse_point("before:assist#2") == {"before_node": "assist", "occurrence": 2}


def test_per_call_changes_are_refused_on_nodes_that_make_no_such_call(world: Any) -> None:
    base, _ = world
    with pytest.raises(ForkPointNotFound, match="never ran"):
        fork(base, change=change.reply("nowhere#1/turn:1", text="x"))
    with pytest.raises(InvalidChange, match="no node 'nowhere'"):
        fork(base, at="start", change=change.reply("nowhere#1/turn:1", text="x"))
    with pytest.raises(InvalidChange):
        change.reply("assist-turn-2", text="x")


def test_the_calls_before_a_call_point_are_its_past_even_when_a_change_alters_them(
        world: Any) -> None:
    """A memory change at turn 2 changes what the node reads: turn 1 happened as recorded
    (served, 0 calls), turn 2 on sees the new value."""
    base, model = world
    result = fork(base, at={"before_call": "assist#1/turn:2"},
                  change=change.memory(set={"product": "Other Co"}))
    assert result.state.status == "completed"
    assert labels(result)[:3] == [("assist#1/turn:1", "reused"),
                                  ("assist#1/turn:1/tool:1", "reused"),
                                  ("assist#1/turn:2", "changed")]
    assert model.requests[0].system_prompt == "You are the support agent for Other Co."


@pytest.mark.parametrize("item", [
    change.tool_result("assist#1/turn:1/tool:1", {"status": "lost"}),
    change.reply("assist#1/turn:2", text="No refund is due."),
    change.rerun("assist#1/turn:1/tool:1"),
])
def test_a_per_call_change_before_the_point_is_refused_not_applied_to_the_past(
        world: Any, item: Any) -> None:
    """The calls before the point are served as recorded: a change there would be lost or
    would alter a past the later served turns never saw, so it is refused, naming the call
    and how to fork at it."""
    base, model = world
    with pytest.raises(InvalidChange) as refused:
        fork(base, at={"before_call": "assist#1/turn:3"}, change=item)
    assert "comes before the fork point" in str(refused.value)
    assert refused.value.context["call"] == str(item.call_address())
    assert model.requests == []


def test_a_per_call_change_at_or_after_the_point_applies(world: Any) -> None:
    base, _ = world
    node = next(p for p in fork_points(base.event_log) if p.node == "assist" and not p.call)
    at_node = fork(base, at=node.address(),
                   change=change.reply("assist#1/turn:1", text="Sorry, no."))
    at_call = fork(base, at={"before_call": "assist#1/turn:2"},
                   change=change.reply("assist#1/turn:3", text="Sorry, no."))
    assert at_node.state.status == at_call.state.status == "completed"
