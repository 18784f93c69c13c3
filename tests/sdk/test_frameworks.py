"""Agents written with the OpenAI Agents SDK and with PydanticAI are recorded unchanged and
reproduced by a null fork: they reach the vendor through the official client."""

from __future__ import annotations

import pytest

from forklab.engine import fork
from forklab.engine.canonical import canonical_equals
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.recording import run_recorded
from forklab.engine.workflows import WorkflowRegistry, workflow_graph
from tests.vendor_stub import VendorStub

TICKET = "Order A-1001 arrived damaged, please refund 39.98"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Environment:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no export to the network
    return Environment(clock=FixedClock(), ids=counter_ids(),
                       workflows=WorkflowRegistry(("tests.sdk.",)))


@pytest.mark.parametrize("name, module", [("support_agents_sdk", "agents"),
                                          ("support_pydantic_ai", "pydantic_ai")])
def test_a_framework_agent_is_recorded_unchanged_and_a_null_fork_reproduces_it(
        clients: VendorStub, env: Environment, name: str, module: str) -> None:
    pytest.importorskip(module)
    base = run_recorded(workflow_graph(env.workflows, f"tests.sdk.frameworks:{name}"),
                        {"ticket": TICKET}, env=env)
    assert base.state.status == "completed", base.state.error
    assert "Results: " in base.memory["output"]
    calls = [getattr(e, "call", None) for e in base.event_log if e.TYPE == "agent.requested"]
    assert calls == ["openai:1", "openai:2"]
    clients.reset()
    result = fork(base, at="start", policy={"memoize": True})
    assert result.state is not None and result.state.status == "completed", result.state
    assert canonical_equals(result.state.memory, base.state.memory)
    assert clients.requests == []

