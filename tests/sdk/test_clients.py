"""Every way the official clients are called is recorded and forked alike: sync and async,
streamed or not, Chat Completions, Responses and Anthropic Messages (SPEC §7)."""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import fork
from forklab.engine.canonical import canonical_equals
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.workflows import WorkflowRegistry, workflow_graph
from tests.vendor_stub import VendorStub

TICKET = "Order A-1001 arrived damaged, please refund 39.98"


@pytest.fixture
def env() -> Environment:
    return Environment(clock=FixedClock(), ids=counter_ids(),
                       workflows=WorkflowRegistry(("forklab.demo_agents.", "tests.sdk.")))


def record(env: Environment, path: str, **inputs: Any) -> RecordedRun:
    run = run_recorded(workflow_graph(env.workflows, path), inputs, env=env)
    assert run.state.status == "completed", run.state.error
    return run


def keys(run: Any, kind: str = "agent.requested") -> list[str | None]:
    return [getattr(e, "call", None) for e in run.event_log if kind == e.TYPE]


def null_fork_reproduces(base: RecordedRun, stub: VendorStub) -> None:
    stub.reset()
    result = fork(base, at="start", policy={"memoize": True})
    assert result.state is not None and result.state.status == "completed", result.state
    assert canonical_equals(result.state.memory, base.state.memory)
    assert stub.requests == []


@pytest.mark.parametrize("path, vendor", [
    ("forklab.demo_agents.support:support_stream", "openai"),
    ("forklab.demo_agents.support:support_claude", "anthropic"),
])
def test_the_support_loop_is_recorded_and_reproduced_by_a_null_fork(
        clients: VendorStub, env: Environment, path: str, vendor: str) -> None:
    base = record(env, path, ticket=TICKET)
    assert base.memory["output"].startswith("Results: ")
    prefix = "triage/" if vendor == "openai" else ""
    assert keys(base) == [f"{prefix}{vendor}:1", f"{prefix}{vendor}:2"]
    assert keys(base, "tool.called") == [f"{prefix}tool:lookup_order#1",
                                         f"{prefix}tool:issue_refund#1"]
    null_fork_reproduces(base, clients)


def test_a_streamed_anthropic_reply_is_assembled_and_recorded_whole(
        clients: VendorStub, env: Environment) -> None:
    base = record(env, "forklab.demo_agents.support:support_claude", ticket=TICKET,
                  stream=True)
    [first, _] = [e for e in base.event_log if e.TYPE == "agent.responded"]
    assert [c["name"] for c in first.tool_calls] == ["lookup_order", "issue_refund"]
    assert base.memory["output"].startswith("Results: ")
    null_fork_reproduces(base, clients)


def test_a_reply_change_reaches_streaming_async_code_as_a_stream(
        clients: VendorStub, env: Environment) -> None:
    base = record(env, "forklab.demo_agents.support:support_stream", ticket=TICKET)
    clients.reset()
    result = fork(base, change={"kind": "reply", "call": "support_stream/triage/openai:2",
                                "text": "Refunded, sorry!"})
    assert result.state is not None and result.state.memory["output"] == "Refunded, sorry!"
    assert clients.requests == []


def test_a_per_call_model_change_goes_out_through_the_anthropic_client(
        clients: VendorStub, env: Environment) -> None:
    base = record(env, "forklab.demo_agents.support:support_claude", ticket=TICKET)
    clients.reset()
    result = fork(base, change={"kind": "model", "call": "support_claude/anthropic:2",
                                "model": "claude-opus-4-1"}, budget={"max_cost_usd": None})
    assert result.state is not None and result.state.status == "completed", result.state
    assert [b["model"] for b in clients.bodies("anthropic")] == ["claude-opus-4-1"]
    headers = clients.last.headers  # the user's key (newer clients send it as a bearer)
    assert "ak-user" in headers.get("x-api-key", headers.get("authorization", ""))


def test_the_responses_api_loop_is_recorded_and_a_null_fork_reproduces_it(
        clients: VendorStub, env: Environment) -> None:
    base = record(env, "tests.sdk.agents:responses_tools", ticket=TICKET)
    assert keys(base) == ["openai:1", "openai:2"]
    assert base.memory["output"].startswith("Results: ")
    null_fork_reproduces(base, clients)
    clients.reset()  # without memo: the tail's second call is live and asks the same
    result = fork(base, at={"before_call": "responses_tools#1/openai:2"})
    assert result.state is not None and canonical_equals(result.state.memory, base.memory)
    assert len(clients.requests) == 1


@pytest.mark.parametrize("name", ["responses_stream", "responses_helper"])
def test_a_streamed_responses_call_is_recorded_and_replayed(
        clients: VendorStub, env: Environment, name: str) -> None:
    base = record(env, f"tests.sdk.agents:{name}", question="Where is A-1001?")
    assert base.memory["output"] == "You said: Where is A-1001?"
    null_fork_reproduces(base, clients)


def test_the_async_anthropic_client_plain_and_streamed(clients: VendorStub,
                                                       env: Environment) -> None:
    base = record(env, "tests.sdk.agents:claude_async", question="Where is A-1001")
    assert base.memory["output"] == ["You said: Where is A-1001", "You said: Where is A-1001?"]
    assert keys(base) == ["anthropic:1", "anthropic:2"]
    null_fork_reproduces(base, clients)


def test_concurrent_async_calls_are_keyed_in_the_order_the_code_starts_them(
        clients: VendorStub, env: Environment) -> None:
    base = record(env, "tests.sdk.agents:gather_two", question="q")
    assert base.memory["output"] == [f"You said: q {i}" for i in range(4)]
    asked = {e.call: e.messages[-1]["content"] for e in base.event_log
             if e.TYPE == "agent.requested"}
    assert asked == {f"openai:{i + 1}": f"q {i}" for i in range(4)}
    for _ in range(3):  # the same keys whatever order the threads answer in
        null_fork_reproduces(base, clients)


def test_an_async_tool_asking_a_model_is_keyed_under_the_tool_call(
        clients: VendorStub, env: Environment) -> None:
    base = record(env, "tests.sdk.agents:nested_async", question="a long text")
    assert base.memory["output"] == "You said: Summarize: a long text"
    assert keys(base) == ["tool:summarize#1/openai:1"]
    assert keys(base, "tool.called") == ["tool:summarize#1"]
    null_fork_reproduces(base, clients)
