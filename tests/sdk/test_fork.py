"""Forking a code-first agent: the function re-executes with the log answering (SPEC §7).

The base is the demo support agent (``forklab.demo_agents.support:support``): a plain loop
over the official ``openai`` client against the vendor stub, whose replies follow the
conversation — so a changed reply or tool result really changes what happens next. The stub
counts what really reached it."""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import change, fork, fork_points, prepare_fork
from forklab.engine.canonical import canonical_equals
from forklab.engine.environment import Environment
from forklab.engine.events import ToolCalled
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.scenarios import tools as world
from forklab.engine.workflows import workflow_graph
from tests.vendor_stub import VendorStub

TICKET = "Order A-1001 arrived damaged, please refund 39.98"
SUPPORT = "forklab.demo_agents.support:support"


@pytest.fixture
def base(clients: VendorStub, env: Environment) -> RecordedRun:
    run = run_recorded(workflow_graph(env.workflows, SUPPORT), {"ticket": TICKET}, env=env)
    assert run.state.status == "completed", run.state.error
    clients.reset()
    return run


def labels(result: Any) -> list[tuple[str | None, str]]:
    return [(c["call"], c["label"]) for c in result.calls]


def refunds() -> int:
    return world.WORLD.count("refund")


def test_fork_points_stand_before_every_call_of_the_workflow(base: RecordedRun) -> None:
    calls = [p.call for p in fork_points(base.event_log) if p.kind == "before_call"]
    assert calls == ["support#1/tool:lookup_order#1", "support#1/tool:issue_refund#1",
                     "support#1/openai:2"]


def test_a_null_fork_at_every_point_makes_no_call_and_reproduces_the_run(
        base: RecordedRun, clients: VendorStub) -> None:
    before = refunds()
    for point in fork_points(base.event_log):
        result = fork(base, at=point.address(), policy={"memoize": True})
        assert result.state.status == "completed", point.label
        assert canonical_equals(result.state.memory, base.state.memory), point.label
    assert clients.requests == []
    assert refunds() == before


def test_without_memo_the_tail_calls_the_users_endpoint_and_the_refund_is_served(
        base: RecordedRun, clients: VendorStub) -> None:
    before = refunds()
    result = fork(base, at={"before_call": "support#1/openai:2"})
    assert result.state.status == "completed"
    assert canonical_equals(result.state.memory, base.state.memory)
    assert labels(result) == [("support#1/openai:1", "reused"),
                              ("support#1/tool:lookup_order#1", "reused"),
                              ("support#1/tool:issue_refund#1", "reused"),
                              ("support#1/openai:2", "live")]
    assert len(clients.requests) == 1
    assert clients.last.headers["authorization"] == "Bearer sk-user"  # the user's client
    assert refunds() == before


def test_a_reply_change_is_what_the_code_reads_from_its_client(
        base: RecordedRun, clients: VendorStub) -> None:
    result = fork(base, change=change.reply("support/openai:2", text="No refund is due."))
    assert result.state.memory["output"] == "No refund is due."
    assert clients.requests == []
    assert labels(result)[-1] == ("support#1/openai:2", "simulated")


def test_a_tool_result_change_reaches_the_model_through_the_code(
        base: RecordedRun, clients: VendorStub) -> None:
    result = fork(base, change=change.tool_result("support/tool:lookup_order#1",
                                                  {"order_id": "A-1001", "found": False}))
    assert result.state.status == "completed", result.state.error
    assert '"found":false' in result.state.memory["output"].replace(" ", "")
    assert [r.vendor for r in clients.requests] == ["openai"]  # openai:2 only: it changed


def test_a_per_call_model_change_changes_the_model_sent_live(
        base: RecordedRun, clients: VendorStub) -> None:
    result = fork(base, change={"kind": "model", "call": "support/openai:2",
                                "model": "gpt-4.1"})
    assert result.state.status == "completed", result.state.error
    assert [b["model"] for b in clients.bodies("openai")] == ["gpt-4.1"]
    assert labels(result)[-1] == ("support#1/openai:2", "changed")


def test_a_refund_the_base_never_made_is_blocked_by_the_guard(
        base: RecordedRun, clients: VendorStub) -> None:
    before = refunds()
    result = fork(base, at="start",
                  change={"kind": "input_patch", "patch": {
                      "ticket": "Order A-1002 was lost, please refund 129"}})
    assert result.state.status == "blocked"
    [effect] = result.suppressed_effects
    assert effect["inputs"]["tool"] == "issue_refund"
    assert refunds() == before


def test_a_blocking_policy_stops_the_refund_even_with_the_same_arguments(
        base: RecordedRun, clients: VendorStub) -> None:
    before = refunds()
    result = fork(base, at="start", policy={"side_effects": "block", "memoize": True})
    assert result.state.status == "blocked"
    [effect] = result.suppressed_effects
    assert effect["inputs"]["call"] == "tool:issue_refund#1"
    assert refunds() == before
    assert clients.requests == []  # the turn before it was served from the log


def test_a_call_moved_to_another_provider_is_answered_by_it_and_read_by_the_client(
        base: RecordedRun, clients: VendorStub) -> None:
    result = fork(base, change={"kind": "model", "call": "support/openai:2",
                                "model": "scripted-small", "provider": "scripted"})
    assert result.state is not None and result.state.status == "completed", result.state
    assert clients.requests == []  # the scripted provider answered; the client parsed it
    assert result.state.memory["output"] != base.state.memory["output"]


def test_per_call_prompt_and_temperature_changes_are_written_into_the_request_sent(
        base: RecordedRun, clients: VendorStub) -> None:
    result = fork(base, change=[
        {"kind": "prompt", "call": "support/openai:2", "system_prompt": "Be terse."},
        {"kind": "temperature", "call": "support/openai:2", "temperature": 0.2}])
    assert result.state is not None and result.state.status == "completed", result.state
    [sent] = clients.bodies("openai")
    assert sent["messages"][0] == {"role": "system", "content": "Be terse."}
    assert sent["temperature"] == 0.2
    assert [m["role"] for m in sent["messages"][1:]] == ["user", "assistant", "tool", "tool"]


def test_a_rerun_makes_a_call_the_fork_would_reuse_go_live(
        base: RecordedRun, clients: VendorStub) -> None:
    result = fork(base, change={"kind": "rerun", "call": "support/openai:1"},
                  policy={"memoize": True})
    assert result.state is not None and result.state.status == "completed", result.state
    assert len(clients.requests) == 1  # openai:1 live; the rest served from the log
    assert dict(labels(result))["support#1/openai:1"] in ("live", "changed")
    assert canonical_equals(result.state.memory, base.state.memory)


def test_a_node_wide_model_change_applies_to_every_call_the_code_makes(
        base: RecordedRun, clients: VendorStub) -> None:
    result = fork(base, at="start", change={"kind": "model", "target": "support",
                                            "model": "gpt-4.1"})
    assert result.state is not None and result.state.status == "completed", result.state
    assert [b["model"] for b in clients.bodies("openai")] == ["gpt-4.1", "gpt-4.1"]
    assert [label for call, label in labels(result) if "openai" in str(call)] == [
        "changed", "changed"]
    assert canonical_equals(result.state.memory, base.state.memory)  # the stub ignores models


def test_the_estimate_counts_the_workflows_tool_calls_after_the_point(
        base: RecordedRun) -> None:
    """The recorded effect of each @forklab.tool call decides: a read runs for real, a
    write is the guard's (served or blocked: no call) unless the policy allows it."""
    tools = [e for e in base.event_log if isinstance(e, ToolCalled)]
    assert [(e.tool, e.effect, e.trusted) for e in tools] == [
        ("lookup_order", "read", True), ("issue_refund", "write", True)]
    at_lookup = prepare_fork(base, at={"before_call": "support#1/tool:lookup_order#1"})
    assert at_lookup.estimate.live_calls == 2  # lookup_order and openai:2; not openai:1
    assert any("1 write tool call(s) (issue_refund) are not counted" in w
               for w in at_lookup.warnings)
    allowed = prepare_fork(base, at={"before_call": "support#1/tool:lookup_order#1"},
                           policy={"side_effects": {"allow": ["issue_refund"]}})
    assert allowed.estimate.live_calls == 3
    at_start = prepare_fork(base, at="start")
    assert at_start.estimate.live_calls == 3  # both model calls and lookup_order
    at_reply = prepare_fork(base, at={"before_call": "support#1/openai:2"})
    assert at_reply.estimate.live_calls == 1
    assert not any("write tool call" in w for w in at_reply.warnings)
