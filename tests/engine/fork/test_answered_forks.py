"""A fork that pauses at an approval gate and is answered — or is resumed after a crash —
continues as the fork it is, and checks clean afterwards:

- the rest of its tail runs under its fork oracle (its changes after the gate hold: a
  temperature change of the node after the gate is in that node's request);
- a null fork of it at its own points reproduces it with no paid call, whether the gate
  was answered at the pause (an edit of a declared key included) or by the fork's own
  ``human_response`` change (re-applied: ``simulated``, nothing paid);
- the base's own executions are what a fork of it serves, before its ancestors': the gate
  the base answered otherwise than its base did is served, not counted ambiguous.
"""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import answer_run, fork, fork_check
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.graph import GraphSpec, parse_graph
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.store import MemoryStore

WARMER = {"kind": "temperature", "target": "publish", "temperature": 0.7}


def gated() -> GraphSpec:
    agent = {"kind": "agent", "agent": "writer", "output": "text"}
    return parse_graph({
        "id": "gated", "start": "write",
        "nodes": [
            {"id": "write", "reads": ["topic"], "writes": ["draft"], "prompt": "About {topic}",
             **agent},
            {"id": "approve", "kind": "approval", "reads": ["draft"],
             "writes": ["approval", "draft"], "prompt": "Publish?"},
            {"id": "publish", "reads": ["draft"], "writes": ["final"], "prompt": "Polish: {draft}",
             **agent},
        ],
        "edges": [{"from": "write", "to": "approve"}, {"from": "approve", "to": "publish"}],
        "agents": {"writer": {"provider": "scripted", "model": "scripted-mini",
                              "system_prompt": "Write a short note."}},
    })


def recorded_base() -> RecordedRun:
    env = Environment(clock=FixedClock(), ids=counter_ids("run"))
    return run_recorded(gated(), {"topic": "otters"}, store=MemoryStore(), env=env,
                        hitl=lambda request: HumanAnswer(decision="approved"))


def paused_fork(base: RecordedRun, change: Any = WARMER) -> str:
    paused = fork(base.run_id, store=base.store, env=base.env, at="before:approve#1",
                  change=change, ignore_budget=True)
    assert paused.state.status == "paused"
    return paused.run_id


def assert_checks_clean(base: RecordedRun, run_id: str) -> None:
    results = fork_check(run_id, store=base.store, env=base.env)
    assert results and all(r.ok for r in results), [r.detail for r in results if not r.ok]


def publish_temperature(base: RecordedRun, run_id: str) -> float:
    requests = [e for e in base.store.read(run_id)
                if e.type == "agent.requested" and e.node == "publish"]
    assert len(requests) == 1
    return float(requests[0].payload()["temperature"])


@pytest.mark.parametrize("answer", [
    HumanAnswer(decision="approved"),
    HumanAnswer(decision="edited", memory_updates={"draft": "a reviewer's draft"}),
    HumanAnswer(decision="rejected"),
])
def test_a_fork_answered_at_its_gate_keeps_its_changes_and_checks_clean(
        answer: HumanAnswer) -> None:
    base = recorded_base()
    fork_id = paused_fork(base)
    done = answer_run(fork_id, answer, store=base.store, env=base.env)
    assert done.state.status == "completed"
    if answer.decision != "rejected":
        assert publish_temperature(base, fork_id) == 0.7  # the fork's change, after the gate
    if answer.memory_updates:
        assert done.memory["draft"] == "a reviewer's draft"
    assert_checks_clean(base, fork_id)


def test_a_fork_answering_its_gate_by_a_change_checks_clean() -> None:
    base = recorded_base()
    edit = {"kind": "human_response", "decision": "edited",
            "memory_updates": {"draft": "the change's draft"}}
    done = fork(base.run_id, store=base.store, env=base.env, at="before:approve#1",
                change=edit, ignore_budget=True)
    assert done.state.status == "completed" and done.state.memory["draft"] == "the change's draft"
    assert_checks_clean(base, done.run_id)


def test_a_fork_of_an_answered_fork_is_served_the_forks_answer_not_its_bases() -> None:
    base = recorded_base()
    fork_id = paused_fork(base, change=None)
    answer_run(fork_id, HumanAnswer(decision="edited", memory_updates={"draft": "mine"}),
               store=base.store, env=base.env)
    again = fork(fork_id, store=base.store, env=base.env, at="before:publish#1",
                 change=WARMER, policy={"memoize": True}, ignore_budget=True)
    assert again.state.status == "completed"
    null = fork(fork_id, store=base.store, env=base.env, at="before:approve#1",
                policy={"memoize": True}, ignore_budget=True)
    assert null.state.status == "completed"  # the gate served from the fork, not paused
    assert null.state.memory["draft"] == "mine"
