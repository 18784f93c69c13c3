"""Subgraphs are not a hole in a fork (issue 8 point 5).

A child run started in a fork's tail shares the fork's budget and appears in its estimate,
its reflection writes are captured, its write tools are guarded; taint crosses the boundary
both ways; strict replay and saved cases of runs with subgraphs work.
"""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import HumanAnswer, change, fork, prepare_fork, replay, run_case, save_case
from forklab.engine.actions import ChildOutcome
from forklab.engine.canonical import canonical_equals
from forklab.engine.graph import Condition, parse_graph
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.reducers import fold
from forklab.engine.store import MemoryStore
from tests.engine.fork.helpers import make_env

SENT: list[str] = []


def _env() -> Any:
    env = make_env()

    def notify(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        SENT.append(str(args["summary"]))
        return {"sent": True}

    def remember(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        ctx.reflect("lessons", "summary", args["summary"])
        return {"remembered": True}

    env.tools.register("t.notify", notify)
    env.tools.register("t.remember", remember)
    env.tools.register("t.fetch", lambda args, ctx: {"page": f"page about {args['topic']}"})
    return env


CHILD = {
    "id": "child", "start": "summarize",
    "nodes": [
        {"id": "summarize", "kind": "agent", "agent": {"model": "scripted-small"},
         "reads": ["topic"], "writes": ["summary"], "prompt": "Summarise {topic}"},
        {"id": "notify", "kind": "tool", "tool": "t.notify", "effect": "write",
         "reads": ["summary"], "writes": ["sent"]},
        {"id": "remember", "kind": "tool", "tool": "t.remember", "reads": ["summary"],
         "writes": ["remembered"]},
        {"id": "fetch", "kind": "tool", "tool": "t.fetch", "trusted": False,
         "reads": ["topic"], "writes": ["page"]},
    ],
    "edges": [{"from": "summarize", "to": "notify"}, {"from": "notify", "to": "remember"},
              {"from": "remember", "to": "fetch"}],
}

PARENT = {
    "id": "parent", "start": "prep",
    "nodes": [
        {"id": "prep", "kind": "agent", "agent": {"model": "scripted-small"},
         "reads": ["goal"], "writes": ["topic"], "prompt": "Pick a topic for {goal}"},
        {"id": "sub", "kind": "subgraph", "graph": "child", "reads": ["topic"],
         "input": {"topic": "topic"},
         "output": {"summary": "summary", "page": "page"}},
        {"id": "final", "kind": "agent", "agent": {"model": "scripted-small"},
         "reads": ["summary"], "writes": ["answer"], "prompt": "Answer from {summary}"},
    ],
    "edges": [{"from": "prep", "to": "sub"}, {"from": "sub", "to": "final"}],
}


def _record(input: dict[str, Any] | None = None) -> RecordedRun:
    store = MemoryStore()
    store.save_graph(parse_graph(CHILD))
    return run_recorded(parse_graph(PARENT), input or {"goal": "g"}, env=_env(), store=store)


def _child_state(result: Any) -> Any:
    child_id = next(a.child_run_id for ex in result.state.executions for a in ex.actions
                    if isinstance(a, ChildOutcome) and ex.node == "sub")
    return fold(result.store.read(child_id))


NEW_TOPIC = change.prompt("prep", "Pick another topic.")
ALLOW_ALL = {"side_effects": {"allow": True}}


GATED = {**PARENT, "id": "gated", "nodes": [
    *PARENT["nodes"][:1],
    {"id": "go", "kind": "router", "reads": ["deep"], "default": "end",
     "rules": [{"when": [{"key": "deep", "op": "truthy"}], "to": "sub"}]},
    *PARENT["nodes"][1:]], "edges": [{"from": "prep", "to": "go"}, {"from": "sub", "to": "final"}]}


def test_a_child_runs_live_calls_count_toward_the_forks_live_call_budget() -> None:
    store = MemoryStore()
    store.save_graph(parse_graph(CHILD))
    base = run_recorded(parse_graph(GATED), {"goal": "g"}, env=_env(), store=store)
    assert [e.node for e in base.state.executions] == ["prep", "go"]

    result = fork(base, at={"before_node": "go"}, change=change.memory(set={"deep": True}),
                  policy=ALLOW_ALL, budget={"max_live_calls": 2, "max_cost_usd": None})

    # the estimate could not foresee the child; summarize and notify run, remember would be
    # the third live call of the fork
    assert result.estimate.live_calls == 0
    assert result.state.status == "failed"
    assert result.state.error["code"] == "live_budget_exceeded"
    assert "child run" in result.state.error["message"]


def test_the_estimate_counts_the_calls_of_a_child_that_will_run_again() -> None:
    base = _record()

    allowed = prepare_fork(base, at="start", change=NEW_TOPIC, policy=ALLOW_ALL)
    guarded = prepare_fork(base, at="start", change=NEW_TOPIC)

    # prep + (summarize, notify, remember, fetch) + final
    assert allowed.estimate.live_calls == 6
    assert guarded.estimate.live_calls == 2  # the child is blocked or served: no call


def test_reflection_writes_inside_a_child_run_in_a_fork_are_captured_and_discarded() -> None:
    base = _record()
    lessons = base.env.reflections.read("lessons")

    result = fork(base, at="start", change=NEW_TOPIC, policy=ALLOW_ALL)

    assert result.state.status == "completed"
    assert base.env.reflections.read("lessons") == lessons
    child = _child_state(result)
    assert [r["store"] for r in child.discarded_reflections] == ["lessons"]


def test_the_guard_applies_to_the_write_tools_of_a_child_run() -> None:
    base = _record()
    sent = len(SENT)

    result = fork(base, at="start", change=NEW_TOPIC,
                  policy={"side_effects": {"allow": ["sub"]}})

    assert len(SENT) == sent
    assert result.state.status == "blocked"
    (effect,) = result.suppressed_effects
    assert effect["node"] == "sub"
    assert "node 'notify'" in effect["reason"]


def test_taint_crosses_a_subgraph_boundary_both_ways() -> None:
    base = _record()

    assert "page" in base.state.taint  # an untrusted tool inside the child wrote it
    assert "summary" not in base.state.taint
    assert "answer" not in base.state.taint


def test_a_tainted_key_feeding_a_child_taints_its_input_there() -> None:
    store = MemoryStore()
    store.save_graph(parse_graph(CHILD))
    spec = dict(PARENT)
    spec["nodes"] = [{"id": "prep", "kind": "tool", "tool": "t.fetch", "trusted": False,
                      "reads": ["goal"], "writes": ["topic"],
                      "params": {"topic": "x"}}, *PARENT["nodes"][1:]]
    base = run_recorded(parse_graph(spec), {"goal": "g"}, env=_env(), store=store)

    child = _child_state(type("R", (), {"state": base.state, "store": store})())

    assert "topic" in child.taint
    assert "summary" in child.taint
    assert {"topic", "summary", "page", "answer"} <= base.state.taint


def test_a_memoized_null_fork_of_a_run_with_a_subgraph_reproduces_it() -> None:
    base = _record()

    result = fork(base, at="start", policy={"memoize": True})

    assert {c["label"] for c in result.calls} == {"reused"}
    assert canonical_equals(result.state.outcome(), base.state.outcome())


@pytest.mark.parametrize("memoize", [False, True])
def test_a_fork_running_a_child_again_reproduces_it_when_nothing_changed(memoize: bool) -> None:
    base = _record()
    sent = len(SENT)

    result = fork(base, at="start", policy={**ALLOW_ALL, "memoize": memoize})

    assert result.state.status == "completed"
    assert canonical_equals(result.state.memory, base.state.memory)
    assert result.state.taint == base.state.taint
    assert len(SENT) == sent + (0 if memoize else 1)


def test_strict_replay_of_an_unchanged_run_with_a_subgraph_succeeds() -> None:
    base = _record()

    state = replay(base.run_id, store=base.store, strict=True)

    assert state.memory == base.state.memory


def test_a_case_saved_from_a_subgraph_fork_passes_cases_run() -> None:
    base = _record()
    result = fork(base, at="start", change=NEW_TOPIC, policy=ALLOW_ALL)
    assert result.state.status == "completed"

    case = save_case(result.run_id, name="sub", store=base.store,
                     criteria=[Condition(key="summary", op="eq",
                                         value=result.state.memory["summary"])])

    assert set(case.graphs) == {"child"}
    outcome = run_case(case)
    assert outcome.passed, outcome.failures


def test_a_resumed_fork_counts_the_calls_its_child_runs_already_made() -> None:
    from forklab.engine.fork.core import fork_runner

    store = MemoryStore()
    store.save_graph(parse_graph(CHILD))
    spec = {**PARENT, "id": "gated-end", "nodes": [
        *PARENT["nodes"], {"id": "ok", "kind": "approval", "reads": ["answer"]}],
        "edges": [*PARENT["edges"], {"from": "final", "to": "ok"}]}
    base = run_recorded(parse_graph(spec), {"goal": "g"}, env=_env(), store=store,
                        hitl=lambda request: HumanAnswer(decision="approved"))

    paused = fork(base, at="start", change=NEW_TOPIC, policy=ALLOW_ALL)
    assert paused.state.status == "paused"

    runner = fork_runner(paused.run_id, store=store, env=base.env)

    # prep, the child's summarize / notify / remember / fetch, final
    assert runner.oracle.spend.live_calls == 6
