"""The tool loop over real HTTP: the openai and anthropic providers against the loopback
stub of both vendor APIs, whose replies depend on what forklab sends (``tests.vendor_stub``:
it asks for the tools it can fill from the user's message, then quotes their results).

The loop records each turn and tool call; a null fork at every point sends no request; a
changed tool result is what the model is sent next; a 429 on a turn is retried and every
attempt recorded on that turn's call.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from forklab.engine import change, fork, fork_points
from forklab.engine.canonical import canonical_equals
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.events import AgentResponded
from forklab.engine.graph import parse_graph
from forklab.engine.providers import AnthropicProvider, OpenAICompatibleProvider, ProviderRegistry
from forklab.engine.recording import run_recorded
from tests.engine.agents.helpers import TICKET, support_graph
from tests.vendor_stub import VendorStub
from tests.vendor_stub.fixtures import server, stub

__all__ = ["server", "stub"]

MODELS = {"openai": "gpt-4.1-mini", "anthropic": "claude-sonnet-4-5"}


def env_for(stub: VendorStub) -> Environment:
    no_wait = lambda _s: None  # noqa: E731 — retries are decided, not waited for, in tests
    return Environment(clock=FixedClock(), ids=counter_ids("run"), providers=ProviderRegistry({
        "openai": OpenAICompatibleProvider(base_url=stub.openai_base_url, api_key="sk-test",
                                           timeout_s=10, sleep=no_wait),
        "anthropic": AnthropicProvider(base_url=stub.anthropic_base_url, api_key="sk-ant-test",
                                       timeout_s=10, sleep=no_wait),
    }))


def record(stub: VendorStub, vendor: str) -> Any:
    graph = support_graph(provider=vendor, model=MODELS[vendor], parallel_tool_calls=False)
    data = graph.to_wire()
    data["agents"]["closer"].update(provider=vendor, model=MODELS[vendor])
    return run_recorded(parse_graph(data), dict(TICKET), env=env_for(stub))


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_a_tool_loop_over_the_vendor_api_records_each_turn_and_tool_call(
        stub: VendorStub, vendor: str) -> None:
    run = record(stub, vendor)
    assert run.state.status == "completed", run.state.error
    kinds = [(c.call, c.kind) for c in run.state.calls]
    assert kinds[:3] == [("assist#1/turn:1", "agent"), ("assist#1/turn:1/tool:1", "tool"),
                         ("assist#1/turn:2", "agent")]
    # the stub quoted the lookup's real result: the loop sent it back
    assert '"order_id":"A-1001"' in run.memory["answer"].replace(" ", "")
    assert "lookup_order=" in run.memory["answer"]
    sent = stub.bodies(vendor)
    assert len(sent) == len([c for c in run.state.calls if c.kind == "agent"])


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_null_forks_at_every_point_send_no_request(stub: VendorStub, vendor: str) -> None:
    run = record(stub, vendor)
    stub.reset()
    for point in fork_points(run.event_log):
        same = fork(run, at=point.address(), policy={"memoize": True})
        assert canonical_equals(same.state.memory, run.state.memory), point.label
    assert stub.requests == []


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_a_replaced_tool_result_is_what_the_vendor_is_sent_next(
        stub: VendorStub, vendor: str) -> None:
    run = record(stub, vendor)
    stub.reset()
    result = fork(run, change=change.tool_result("assist#1/turn:1/tool:1", {"found": False}))
    assert result.state.status == "completed", result.state.error
    assert '"found":false' in result.state.memory["answer"].replace(" ", "")
    first = json.dumps(stub.bodies(vendor)[0])  # the first request the fork sent: turn 2
    assert '{\\"found\\":false}' in first


def test_a_429_on_a_turn_is_retried_and_every_attempt_is_recorded(stub: VendorStub) -> None:
    stub.fail(429, message="slow down", retry_after=1)
    run = record(stub, "openai")
    assert run.state.status == "completed"
    first = next(e for e in run.event_log if isinstance(e, AgentResponded))
    assert [a["status"] for a in first.attempts] == [429, 200]
    assert first.attempts[0]["retry_after_s"] == 1.0
