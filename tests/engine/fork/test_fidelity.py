"""The fidelity invariant (SPEC §3.7) over every fork point of every demo scenario.

A fork that changes nothing, with memoization on, makes no model or tool call — counted at
the provider and the tools themselves, not read from labels — labels every call of its tail
``reused``, and ends in exactly the base run's outcome (canonical equality, identity and
timestamps aside).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forklab.engine import change, fork, fork_points
from forklab.engine.canonical import canonical_equals, canonical_json
from forklab.engine.fork.fidelity import fork_check
from forklab.engine.graph import parse_graph
from forklab.engine.recording import run_recorded
from forklab.engine.store import MemoryStore
from tests.engine.fork.helpers import NAMES, Counter, make_env, record, world


def _cases() -> list[tuple[str, int, str]]:
    cases = []
    for name in NAMES:
        for point in fork_points(record(name).event_log):
            cases.append((name, point.seq, point.node or "end"))
    return cases


CASES = _cases()


def test_every_scenario_has_fork_points_and_they_are_all_checked() -> None:
    assert {name for name, _, _ in CASES} == set(NAMES)
    assert len(CASES) >= 3 * len(NAMES)


@pytest.mark.parametrize(("name", "seq", "node"), CASES,
                         ids=[f"{n}-seq{s}-{node}" for n, s, node in CASES])
def test_a_null_fork_with_memoize_makes_no_calls_and_reproduces_the_base(
    name: str, seq: int, node: str
) -> None:
    counter = Counter()
    base = record(name, counter=counter)
    assert base.state.finished
    counter.reset()
    before = world()

    result = fork(base, at={"sequence": seq}, policy={"memoize": True})

    assert result.fork_sequence_id == seq
    assert counter.model_calls == [], f"{len(counter.model_calls)} model call(s) were made"
    assert counter.tool_calls == [], f"tools were executed: {counter.tool_calls}"
    assert world() == before
    assert all(c["label"] == "reused" for c in result.calls), result.calls
    assert result.incurred_cost_usd == 0.0
    assert canonical_equals(result.state.outcome(), base.state.outcome()), result.explain()
    assert result.diff is not None and result.diff.memory == {}
    assert result.diff.divergence is None


@pytest.mark.parametrize("name", NAMES)
def test_fork_check_passes_every_point_of_every_scenario(name: str) -> None:
    base = record(name)

    results = fork_check(base.run_id, store=base.store, env=base.env)

    assert [r.point.seq for r in results] == [p.seq for p in fork_points(base.event_log)]
    failed = [r.detail for r in results if not r.ok]
    assert not failed, "\n".join(failed)


ROLL_GRAPH = {
    "id": "dice", "start": "roll", "max_iterations": 2,
    "nodes": [
        {"id": "roll", "kind": "tool", "tool": "t.roll", "writes": ["n"]},
        {"id": "again", "kind": "router", "reads": ["n"], "default": "roll",
         "rules": [{"when": [{"key": "$iteration", "op": "gte", "value": 2}], "to": "end"}]},
    ],
    "edges": [{"from": "roll", "to": "again"}],
}


def _child_graph(text: str) -> dict:
    return {"id": "child", "start": "c", "nodes": [
        {"id": "c", "kind": "tool", "tool": "t.echo", "reads": ["topic"], "writes": ["out"],
         "params": {"text": text}}]}


def test_fork_check_reports_a_point_whose_null_fork_does_not_reproduce() -> None:
    env = make_env()
    env.tools.register("t.echo", lambda args, ctx: dict(args))
    store = MemoryStore()
    store.save_graph(parse_graph(_child_graph("v1")))
    base = run_recorded(parse_graph({
        "id": "parent", "start": "sub", "nodes": [
            {"id": "sub", "kind": "subgraph", "graph": "child", "reads": ["topic"],
             "input": {"topic": "topic"}, "output": {"result": "out"}}]}),
        {"topic": "t"}, env=env, store=store)
    store.save_graph(parse_graph(_child_graph("v2")))  # the child graph drifted since

    first = fork_check(base.run_id, store=base.store, env=env)[0]

    # the subgraph's fingerprint covers its child graph: nothing recorded matches any more,
    # and the guard will not serve a child run recorded under another child graph
    assert not first.ok
    assert "null fork at seq 1" in first.detail
    assert "blocked" in first.detail


def test_a_fingerprint_an_ancestor_recorded_with_other_outputs_is_served_from_the_run_forked(
) -> None:
    rolls = iter(range(100))
    env = make_env()
    env.tools.register("t.roll", lambda args, ctx: next(rolls))
    base = run_recorded(parse_graph(ROLL_GRAPH), {}, env=env)
    rerolled = fork(base, at="start")  # the tool rolls again: same fingerprints, new outputs
    assert [e.writes for e in rerolled.state.executions if e.node == "roll"] == [
        {"n": 2}, {"n": 3}]

    result = fork(rerolled.run_id, store=base.store, env=env, at="start",
                  policy={"memoize": True})

    # the run forked is the recording: its own executions of 'roll' are served whole, the
    # base's (same fingerprints, other outputs) are not consulted for them
    assert [h["node"] for h in result.memo_hits] == ["roll", "again", "roll", "again"]
    assert [(c["node"], c["label"]) for c in result.calls] == [("roll", "reused")] * 2
    assert result.state.memory["n"] == 3
    assert next(rolls) == 4  # nothing rolled


VARIANT_CHANGES = {
    "research-write": change.prompt("write", "Be terse."),
    "diamond": change.prompt("left", "Do your part badly."),
    "review-loop": change.temperature("draft", 1.1),
    "panel-vote": change.model("vote.voters[1]", "scripted-large"),
    "triage-router": change.temperature("reply", 0.0),
    "research-web": change.prompt("answer", "Answer in one line."),
    "support-agent": change.prompt("assist", "Never refund; apologise instead."),
    "supervisor": change.temperature("billing", 0.9),
}


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_null_fork_of_a_random_variant_at_a_random_point_reproduces_the_variant(data) -> None:
    name = data.draw(st.sampled_from(sorted(VARIANT_CHANGES)))
    counter = Counter()
    store = MemoryStore()
    base = record(name, counter=counter, store=store)
    point = data.draw(st.sampled_from(fork_points(base.event_log)[:-1]))
    variant = fork(base, at={"sequence": point.seq}, change=VARIANT_CHANGES[name],
                   policy={"memoize": data.draw(st.booleans())})
    own = [p for p in fork_points(variant.event_log) if p.run_id == variant.run_id]
    vpoint = data.draw(st.sampled_from(own))
    counter.reset()

    again = fork(variant.run_id, store=store, env=base.env, at=vpoint.address(),
                 policy={"memoize": True})

    assert counter.model_calls == [] and counter.tool_calls == []
    assert all(c["label"] == "reused" for c in again.calls), again.calls
    assert canonical_equals(again.state.outcome(), variant.state.outcome()), (
        f"{name} at {point.label}, then at {vpoint.label}:\n{again.explain()}\n"
        f"{canonical_json(again.state.outcome())[:400]}")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_null_fork_of_a_variant_at_an_inherited_point_is_a_fork_of_its_base_with_its_change(
    data,
) -> None:
    name = data.draw(st.sampled_from(sorted(VARIANT_CHANGES)))
    base = record(name)
    # node boundaries: the variant forks at one, and with nothing inherited the null fork
    # below is at the same boundary (a call point there would be the variant's own call)
    points = [p for p in fork_points(base.event_log)[:-1] if p.call is None]
    point = data.draw(st.sampled_from(points[1:] or points))
    variant = fork(base, at={"sequence": point.seq}, change=VARIANT_CHANGES[name])
    inherited = [p for p in fork_points(variant.event_log) if p.run_id == base.run_id]
    vpoint = data.draw(st.sampled_from(inherited or [point]))
    memoize = data.draw(st.booleans())

    again = fork(variant.run_id, store=base.store, env=base.env, at=vpoint.address(),
                 policy={"memoize": memoize})
    # the same point of the base: a call point's address names its call (its seq is its
    # node's boundary, where the whole node re-runs)
    direct = fork(base, at=vpoint.address(), change=VARIANT_CHANGES[name],
                  policy={"memoize": memoize})

    assert canonical_equals(again.state.outcome(), direct.state.outcome()), again.explain()


@pytest.mark.parametrize("name", sorted(VARIANT_CHANGES))
def test_fork_check_of_a_fork_null_forks_every_point_of_its_own_log(name: str) -> None:
    base = record(name)
    variant = fork(base, at=fork_points(base.event_log)[1].address(),
                   change=VARIANT_CHANGES[name])

    results = fork_check(variant.run_id, store=base.store, env=base.env)

    own = [p for p in fork_points(variant.event_log, store=base.store)
           if p.run_id == variant.run_id]
    assert own and [r.point for r in results] == own
    failed = [r.detail for r in results if not r.ok]
    assert not failed, "\n".join(failed)
