"""A vendor's error answer reaches the team's code as the vendor's own exception (SPEC §7).

forklab retries as its providers do; what survives the retries is recorded as a failed call
(status, message, attempts) and handed to the client as the vendor's answer, marked
``x-should-retry: false``, so the official client raises exactly what it raises without
forklab — ``openai.RateLimitError``, ``anthropic.BadRequestError`` — once, without a retry
loop of its own. A fork serving that recorded failure hands it over again.
"""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import fork
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.workflows import WorkflowRegistry, workflow_graph
from tests.vendor_stub import VendorStub


@pytest.fixture
def env() -> Environment:
    return Environment(clock=FixedClock(), ids=counter_ids(),
                       workflows=WorkflowRegistry(("forklab.demo_agents.", "tests.sdk.")))


def record(env: Environment, name: str, **inputs: Any) -> RecordedRun:
    return run_recorded(workflow_graph(env.workflows, f"tests.sdk.agents:{name}"), inputs,
                        env=env)


def failed_calls(run: Any) -> list[Any]:
    return [e for e in run.event_log if e.TYPE == "call.failed"]


def test_a_rate_limit_that_survives_the_retries_is_the_clients_rate_limit_error(
        clients: VendorStub, env: Environment) -> None:
    clients.fail(429, message="slow down", retry_after="0", times=3)
    run = record(env, "careful_openai", question="hi")
    assert run.state.status == "completed", run.state.error
    assert run.memory["output"] == "RateLimitError 429: Error code: 429 - slow down"
    assert len(clients.requests) == 3  # forklab's 2 retries; the client made none of its own
    [failed] = failed_calls(run)
    assert failed.call == "openai:1" and failed.label == "live"
    assert failed.error["type"] == "provider_error" and failed.error["status"] == 429
    assert [a["status"] for a in failed.error["attempts"]] == [429, 429, 429]


def test_a_streamed_call_refused_with_a_400_raises_bad_request_error(
        clients: VendorStub, env: Environment) -> None:
    clients.fail(400, message="model gpt-nope does not exist")
    run = record(env, "careful_openai", question="hi", stream=True)
    assert run.memory["output"].startswith("BadRequestError 400: Error code: 400")
    assert "model gpt-nope does not exist" in run.memory["output"]
    assert len(clients.requests) == 1  # a 400 is not retried


def test_an_anthropic_server_error_is_the_clients_internal_server_error(
        clients: VendorStub, env: Environment) -> None:
    clients.fail(500, message="overloaded", times=2, retry_after="0")
    run = record(env, "careful_claude", question="hi")
    assert run.state.status == "completed", run.state.error
    assert run.memory["output"].startswith("InternalServerError 500: ")
    assert "overloaded" in run.memory["output"]
    assert len(clients.requests) == 2  # max_retries=1: one retry, by forklab
    [failed] = failed_calls(run)
    assert [a["status"] for a in failed.error["attempts"]] == [500, 500]


def test_a_fork_serving_the_recorded_failure_raises_the_same_exception_again(
        clients: VendorStub, env: Environment) -> None:
    clients.fail(429, message="slow down", retry_after="0", times=3)
    base = record(env, "careful_openai", question="hi")
    clients.reset()
    result = fork(base, at={"before_node": "careful_openai"}, policy={"memoize": True})
    assert result.state is not None and result.state.status == "completed"
    assert result.state.memory["output"] == base.memory["output"]
    assert clients.requests == []  # served from the log
    assert [c["label"] for c in result.calls] == ["reused"]


def test_a_served_anthropic_failure_is_written_in_anthropics_error_form(
        clients: VendorStub, env: Environment) -> None:
    clients.fail(400, message="max_tokens: too large")
    base = record(env, "careful_claude", question="hi")
    clients.reset()
    result = fork(base, at={"before_node": "careful_claude"}, policy={"memoize": True})
    assert result.state is not None
    assert result.state.memory["output"] == base.memory["output"]
    assert base.memory["output"].startswith("BadRequestError 400: ")
    assert clients.requests == []


def test_an_uncaught_vendor_error_fails_the_node_as_that_calls_failure(
        clients: VendorStub, env: Environment) -> None:
    clients.fail(500, message="boom", retry_after="0", times=3)
    run = record(env, "two_step", question="hi")  # catches nothing; default max_retries=2
    assert run.state.status == "failed"
    error = run.state.error or {}
    assert error["type"] == "provider_error" and error["status"] == 500
    assert "HTTP 500" in error["message"] and "boom" in error["message"]
    assert len(failed_calls(run)) == 1 and len(clients.requests) == 3
