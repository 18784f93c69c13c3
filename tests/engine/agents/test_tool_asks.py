"""A model asked from inside a tool (``ctx.ask``) is a call like any other (SPEC §6.4)."""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import change, fork, fork_points
from forklab.engine.canonical import canonical_equals
from forklab.engine.errors import LiveBudgetExceeded
from forklab.engine.recording import run_recorded
from tests.engine.agents.helpers import (
    TICKET,
    FollowingModel,
    asking_env,
    asking_graph,
    tool_results,
)


def script(request: Any) -> Any:
    """Calls summarize_order once, then quotes its summary; inside the tool it echoes."""
    if request.tools:
        results = tool_results(request)
        if not results:
            return "", [("summarize_order", {"order_id": "A-1001"})]
        return f"Summary: {results[0][1]['summary']}", []
    user = request.messages[-1]["content"]
    return f"[{request.system_prompt}] {user[:60]}", []


def record() -> tuple[Any, FollowingModel]:
    model = FollowingModel(script=script)
    base = run_recorded(asking_graph(), dict(TICKET), env=asking_env(model))
    assert base.state.status == "completed", base.state.error
    return base, model


def test_a_tools_asks_are_recorded_priced_calls_under_its_key() -> None:
    base, model = record()
    keys = [(c.call, c.kind) for c in base.state.calls]
    assert keys[:5] == [("assist#1/turn:1", "agent"),
                        ("assist#1/turn:1/tool:1/ask:1", "agent"),
                        ("assist#1/turn:1/tool:1/ask:2", "agent"),
                        ("assist#1/turn:1/tool:1", "tool"),
                        ("assist#1/turn:2", "agent")]
    asks = [c for c in base.state.calls if "/ask:" in (c.call or "")]
    assert all(c.cost_usd and c.cost_usd > 0 for c in asks)
    assert model.requests[2].system_prompt == "Close the ticket politely."
    assert base.memory["answer"].startswith("Summary: [Close the ticket politely.] Polish:")


def test_a_null_fork_serves_the_asks_from_the_log_and_a_changed_ask_reruns_its_tool() -> None:
    base, model = record()
    model.requests.clear()
    for point in fork_points(base.event_log):
        same = fork(base, at=point.address(), policy={"memoize": True})
        assert canonical_equals(same.state.memory, base.state.memory), point.label
    assert model.requests == []
    edited = fork(base, change=change.reply("assist#1/turn:1/tool:1/ask:2", text="Short."))
    assert edited.state.memory["answer"] == "Summary: Short."
    labels = {c["call"]: c["label"] for c in edited.calls}
    assert labels["assist#1/turn:1/tool:1/ask:1"] in ("live", "reused")
    assert labels["assist#1/turn:1/tool:1/ask:2"] == "simulated"


def test_a_budget_counts_every_ask_before_anything_is_spent() -> None:
    """The preflight estimate counts the tool call and the asks inside it: a fork that
    would need six live calls is refused under a budget of two, with no request sent."""
    base, model = record()
    model.requests.clear()
    with pytest.raises(LiveBudgetExceeded, match="6 live calls"):
        fork(base, at="start", change=change.prompt("assist", "Be brief."),
             budget={"max_live_calls": 2})
    assert model.requests == []
