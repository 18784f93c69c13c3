"""Recording a code-first agent: its vendor-client calls and tool calls are the run's calls."""

from __future__ import annotations

from typing import Any

from forklab.engine.environment import Environment
from forklab.engine.recording import run_recorded
from forklab.engine.workflows import workflow_graph
from tests.vendor_stub import VendorStub

TICKET = "Order A-1001 arrived damaged, please refund 39.98"


def record(env: Environment, path: str, **inputs: Any) -> Any:
    return run_recorded(workflow_graph(env.workflows, path), inputs, env=env)


def calls(run: Any) -> list[tuple[str | None, str | None]]:
    return [(e.TYPE, getattr(e, "call", None)) for e in run.event_log
            if e.TYPE in ("agent.requested", "tool.called")]


def test_a_sync_openai_agent_is_recorded_call_by_call(clients: VendorStub,
                                                      env: Environment) -> None:
    run = record(env, "forklab.demo_agents.support:support", ticket=TICKET)
    assert run.state.status == "completed", run.state
    assert run.memory["output"].startswith("Results: ")
    assert calls(run) == [("agent.requested", "openai:1"),
                          ("tool.called", "tool:lookup_order#1"),
                          ("tool.called", "tool:issue_refund#1"),
                          ("agent.requested", "openai:2")]
    assert len(clients.bodies("openai")) == 2
    assert clients.requests[0].headers["authorization"] == "Bearer sk-user"


def test_a_retryable_vendor_error_is_retried_and_every_attempt_recorded(
        clients: VendorStub, env: Environment) -> None:
    clients.fail(429, retry_after="0")
    run = record(env, "forklab.demo_agents.support:support", ticket=TICKET)
    assert run.state.status == "completed", run.state.error
    first = next(e for e in run.event_log if e.TYPE == "agent.responded")
    assert [a["status"] for a in first.attempts] == [429, 200]
    assert first.attempts[0]["retry_after_s"] == 0.0
    assert len(clients.bodies("openai")) == 3  # one retry, then the second call


def test_a_vendor_refusal_fails_the_node_with_the_vendors_status_and_message(
        clients: VendorStub, env: Environment) -> None:
    clients.fail(400, message="model gpt-nope does not exist")
    run = record(env, "forklab.demo_agents.support:support", ticket=TICKET)
    assert run.state.status == "failed"
    error = run.state.error or {}
    assert error["type"] == "provider_error"
    assert "HTTP 400" in error["message"] and "model gpt-nope does not exist" in error["message"]
    assert len(clients.requests) == 1  # a 400 is not retried
