"""LangGraph agents over langchain-openai and langchain-anthropic, recorded unchanged: their
nodes are steps, their vendor calls the run's calls, forked call by call."""

from __future__ import annotations

import pytest

from forklab.engine import fork
from forklab.engine.canonical import canonical_equals
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.recording import run_recorded
from forklab.engine.workflows import DEFAULT_WORKFLOW_PREFIXES, WorkflowRegistry, workflow_graph
from tests.vendor_stub import VendorStub

TICKET = "Order A-1001 arrived damaged, please refund 39.98"


@pytest.mark.parametrize("path, package, vendor", [
    ("forklab.demo_agents.support_langgraph:support_langgraph", "langchain_openai", "openai"),
    ("tests.sdk.frameworks:support_langgraph_anthropic", "langchain_anthropic", "anthropic"),
])
def test_a_langgraph_agent_is_recorded_with_its_nodes_as_steps_and_forked(
        clients: VendorStub, path: str, package: str, vendor: str) -> None:
    pytest.importorskip(package)
    env = Environment(clock=FixedClock(), ids=counter_ids(),
                      workflows=WorkflowRegistry((*DEFAULT_WORKFLOW_PREFIXES, "tests.sdk.")))
    graph = workflow_graph(env.workflows, path)
    base = run_recorded(graph, {"ticket": TICKET}, env=env)
    assert base.state.status == "completed", base.state.error
    assert base.memory["output"].startswith("Results: ")
    assert len(clients.bodies(vendor)) == 2
    calls = {getattr(e, "call", None) for e in base.event_log
             if e.TYPE in ("agent.requested", "tool.called")}
    assert calls == {f"agent/{vendor}:1", "tools/tool:lookup_order#1",
                     "tools/tool:issue_refund#1", f"agent/{vendor}:2"}
    clients.reset()
    result = fork(base, at="start", policy={"memoize": True})
    assert result.state is not None and result.state.status == "completed", result.state
    assert canonical_equals(result.state.memory, base.state.memory)
    assert clients.requests == []
    workflow = path.rsplit(":", 1)[1]
    result = fork(base, change={"kind": "reply", "call": f"{workflow}/agent/{vendor}:2",
                                "text": "No refund."})
    assert result.state is not None and result.state.memory["output"] == "No refund."
    assert clients.requests == []
