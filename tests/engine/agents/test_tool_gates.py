"""A tool with ``approval: true`` is a human gate per call (SPEC §6.1, §6.3).

The refund tool waits for a human: the run pauses at the call's gate; approved, the refund
is made; rejected, the model is told and no refund happens; edited, it is made with the
edited arguments. A fork serves a recorded answer for the calls before its point, answers a
gate by a ``human_response`` change with ``call``, or pauses there.
"""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import change, fork
from forklab.engine.canonical import canonical_equals
from forklab.engine.events import HumanAnswered, HumanRequested
from forklab.engine.fork.continuing import answer_run
from forklab.engine.graph import parse_graph
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.reducers import fold
from tests.engine.agents.helpers import TICKET, FollowingModel, env_with, refunds, support_graph

GATE = "assist#1/turn:2/tool:1"


def gated_graph() -> Any:
    data = support_graph().to_wire()
    data["tools"]["issue_refund"]["approval"] = True
    return parse_graph(data)


def paused() -> tuple[RecordedRun, FollowingModel]:
    model = FollowingModel()
    run = run_recorded(gated_graph(), dict(TICKET), env=env_with(model))
    return run, model


def test_a_gated_tool_call_pauses_the_run_at_its_gate() -> None:
    before = refunds()
    run, _ = paused()
    assert run.state.status == "paused"
    assert run.state.pending_human["call"] == "turn:2/tool:1"
    [asked] = [e for e in run.event_log if isinstance(e, HumanRequested)]
    assert asked.context == {"tool": "issue_refund", "call": "turn:2/tool:1",
                             "args": {"order_id": "A-1001", "amount": 39.98}}
    assert refunds() == before


@pytest.mark.parametrize(("decision", "data", "made", "amount"), [
    ("approved", None, 1, 39.98),
    ("rejected", None, 0, None),
    ("edited", {"order_id": "A-1001", "amount": 10.0}, 1, 10.0),
])
def test_an_answer_at_the_gate_runs_the_call_as_decided(decision: str, data: Any, made: int,
                                                        amount: float | None) -> None:
    run, model = paused()
    asked_before = len(model.requests)
    before = refunds()
    done = answer_run(run.run_id, HumanAnswer(decision=decision, data=data), store=run.store,
                      env=run.env)
    assert done.state.status == "completed", done.state.error
    assert refunds() == before + made
    # what the node had recorded before the gate was served back, not asked again
    assert len(model.requests) - asked_before == 2  # turn 3 and the closer
    answered = [e for e in done.store.read(run.run_id) if isinstance(e, HumanAnswered)]
    assert [(e.decision, e.call) for e in answered] == [(decision, "turn:2/tool:1")]
    if amount is not None:
        assert f"Refunded {amount}" in done.state.memory["answer"]
    else:
        assert "rejected" in done.state.memory["conversation"][4]["content"]
    assert canonical_equals(fold(done.store.read(run.run_id)).memory, done.state.memory)


def test_a_fork_answers_a_gate_by_a_change_for_that_call_or_pauses_there() -> None:
    run, _ = paused()
    done = answer_run(run.run_id, HumanAnswer(decision="approved"), store=run.store,
                      env=run.env)
    before = refunds()
    again = fork(done.run_id, store=done.store, env=done.env,
                 at={"before_call": "assist#1/turn:3"}, policy={"memoize": True})
    assert again.state.status == "completed"  # the recorded approval is served
    assert refunds() == before
    asked = fork(done.run_id, store=done.store, env=done.env, at="start",
                 change=change.prompt("assist", "Be brief."))
    assert asked.state.status == "paused"  # a new run of the gate waits for a human
    answered = fork(done.run_id, store=done.store, env=done.env, at="start",
                    change=[change.prompt("assist", "Be brief."),
                            change.human_response("rejected", call=GATE)])
    assert answered.state.status == "completed"
    assert refunds() == before
