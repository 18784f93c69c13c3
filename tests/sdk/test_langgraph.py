"""A LangGraph agent over langchain-openai, recorded unchanged: its nodes are steps."""

from __future__ import annotations

import pytest

from forklab.engine import fork
from forklab.engine.canonical import canonical_equals
from forklab.engine.environment import Environment
from forklab.engine.recording import run_recorded
from forklab.engine.workflows import workflow_graph
from tests.vendor_stub import VendorStub

pytest.importorskip("langchain_openai")

TICKET = "Order A-1001 arrived damaged, please refund 39.98"


def test_a_langgraph_agent_is_recorded_with_its_nodes_as_steps_and_forked(
        clients: VendorStub, env: Environment) -> None:
    graph = workflow_graph(env.workflows,
                           "forklab.demo_agents.support_langgraph:support_langgraph")
    base = run_recorded(graph, {"ticket": TICKET}, env=env)
    assert base.state.status == "completed", base.state.error
    assert base.memory["output"].startswith("Results: ")
    calls = {getattr(e, "call", None) for e in base.event_log
             if e.TYPE in ("agent.requested", "tool.called")}
    assert calls == {"agent/openai:1", "tools/tool:lookup_order#1",
                     "tools/tool:issue_refund#1", "agent/openai:2"}
    clients.reset()
    result = fork(base, at="start", policy={"memoize": True})
    assert result.state is not None and result.state.status == "completed", result.state
    assert canonical_equals(result.state.memory, base.state.memory)
    assert clients.requests == []
    result = fork(base, change={"kind": "reply", "call": "support_langgraph/agent/openai:2",
                                "text": "No refund."})
    assert result.state is not None and result.state.memory["output"] == "No refund."
