"""Invariant 5 — subgraphs are not a hole (SPEC §1, §3.4; semantics "Budgets", "Fingerprint").

Inside a subgraph executed in a fork tail, live calls spend from the fork's budget and appear
in its estimate; taint crosses the boundary both ways; reflection writes are discarded; the
guard and the memo see the child's input and the child graph's version. An unchanged run with
subgraphs replays strictly, and a case saved from a fork with subgraphs passes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points, replay, run_case, save_case
from forklab.engine.actions import ChildOutcome
from forklab.engine.errors import LiveBudgetExceeded
from forklab.engine.graph import AgentNode, Condition, GraphSpec, SubgraphNode, parse_graph
from forklab.engine.recording import run_recorded
from forklab.engine.reducers import fold
from forklab.engine.state import Execution, RunState
from forklab.engine.store import Store
from tests.engine.properties.changes import changes
from tests.engine.properties.graphs import Options, graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case, same_outcome, show
from tests.engine.properties.world import Harness, hitl

SUBGRAPHS = Options(segments=("single", "single", "diamond", "branch"),
                    singles=("subgraph", "subgraph", "agent", "tool", "multi"))
STABLE_SUBGRAPHS = Options(segments=("single", "single", "diamond"),
                           singles=("subgraph", "subgraph", "agent", "tool", "multi"),
                           flaky_tools=False)
"""No routers, loops, gates or failing tools: a fork takes the base's path."""


def child_runs(state: RunState, *, live_only: bool = False) -> list[tuple[Execution, str]]:
    """(execution, child run id) of every subgraph execution that started a child run."""
    found = []
    for ex in state.executions:
        for action in ex.actions:
            if isinstance(action, ChildOutcome) and (
                    not live_only or action.label in ("live", "changed")):
                found.append((ex, action.child_run_id))
    return found


@examples(30)
@given(case=graph_cases(SUBGRAPHS), data=st.data())
def test_a_subgraphs_live_calls_spend_from_the_parent_forks_budget(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")
    run = {"at": "start", "change": item, "hitl": hitl, "policy": {"side_effects": {"allow": True}}}
    estimate = fork(base, dry_run=True, ignore_budget=True, **run).estimate.live_calls
    limit = estimate + data.draw(st.integers(0, 2), label="headroom")
    h.counter.reset()
    try:
        result = fork(base, budget={"max_live_calls": limit, "max_cost_usd": None}, **run)
    except LiveBudgetExceeded as refused:
        raise AssertionError(f"refused an estimate of {estimate} under a limit of {limit}: "
                             f"{refused.message}") from None

    assert h.counter.total <= limit, (
        f"{h.counter.total} real calls under max_live_calls={limit} (estimate {estimate})")
    if h.counter.total > estimate:
        assert result.state.error is None or result.state.error["code"] == "live_budget_exceeded"


@examples(40)
@given(case=graph_cases(STABLE_SUBGRAPHS), data=st.data())
def test_the_estimate_of_a_path_stable_null_fork_is_exactly_the_calls_it_makes(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    side_effects = data.draw(st.sampled_from(["replay", {"allow": True}]), label="side_effects")
    h.counter.reset()

    result = fork(base, at={"sequence": point.seq}, hitl=hitl, ignore_budget=True,
                  policy={"side_effects": side_effects})

    assert result.estimate.live_calls == h.counter.total, (
        f"estimated {result.estimate.live_calls} live calls; made {h.counter.total}: "
        f"{[r.model for r in h.counter.model_calls]} {h.counter.tool_calls}")


@examples(40)
@given(case=graph_cases(STABLE_SUBGRAPHS), data=st.data())
def test_the_estimate_of_a_path_stable_fork_never_undercounts_its_calls(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    item = data.draw(changes(case.graph, base.state), label="change")
    policy = {"memoize": data.draw(st.booleans(), label="memoize"),
              "side_effects": data.draw(st.sampled_from(["replay", {"allow": True}]),
                                        label="side_effects")}
    h.counter.reset()

    result = fork(base, at={"sequence": point.seq}, change=item, hitl=hitl, ignore_budget=True,
                  policy=policy)

    assert h.counter.total <= result.estimate.live_calls, (
        f"estimated {result.estimate.live_calls} live calls; made {h.counter.total}")


def _taint_checks(store: Store, state: RunState, graph: GraphSpec) -> None:
    events = store.read(state.run_id)
    offset = events[0].seq - 1
    for ex, child_id in child_runs(state, live_only=True):
        node = graph.node(ex.node)
        assert isinstance(node, SubgraphNode)
        before = fold(events[:ex.start_seq - 1 - offset])
        after = fold(events[:ex.end_seq - offset])
        child = fold(store.read(child_id))
        rewritten = {k for e in child.executions for k in (*e.writes, *e.deletes)}
        for child_key, parent_key in node.input.items():
            if parent_key in before.taint and child_key not in rewritten:
                assert child_key in child.taint, (
                    f"{parent_key!r} is tainted in the parent; {ex.node!r} passed it to its "
                    f"child as {child_key!r}, untainted")
        for parent_key, child_key in node.output.items():
            if child_key in child.taint:
                assert parent_key in after.taint, (
                    f"{child_key!r} is tainted in the child; {ex.node!r} mapped it back to "
                    f"{parent_key!r}, untainted")


@examples(40)
@given(case=graph_cases(SUBGRAPHS), data=st.data())
def test_taint_crosses_the_subgraph_boundary_both_ways(case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    _taint_checks(base.store, base.state, case.graph)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")

    result = fork(base, at="start", change=item, hitl=hitl, ignore_budget=True,
                  policy={"side_effects": {"allow": True}})

    _taint_checks(base.store, result.state, result_graph(base.store, result))


def result_graph(store: Store, result: Any) -> GraphSpec:
    from forklab.engine.events import RunForked

    forked = next(e for e in store.read(result.run_id)[:3] if isinstance(e, RunForked))
    return parse_graph(forked.graph)


@examples(30)
@given(case=graph_cases(SUBGRAPHS), data=st.data())
def test_reflection_writes_inside_a_subgraph_in_a_fork_are_captured_and_discarded(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")
    before_runs = set(base.store.run_ids())
    h.counter.reset()
    writes = h.reflections.writes

    result = fork(base, at="start", change=item, hitl=hitl, ignore_budget=True,
                  policy={"side_effects": {"allow": True}})

    assert h.reflections.writes == writes, "a fork wrote to the cross-run reflection store"
    reflected = sum(1 for path, _ in h.counter.tool_calls if path == "props.reflect")
    new_runs = [r for r in base.store.run_ids() if r not in before_runs]
    discarded = sum(len(fold(base.store.read(r)).discarded_reflections) for r in new_runs)
    assert discarded == reflected, (
        f"{reflected} reflect tool call(s) ran in the fork; {discarded} write(s) were recorded "
        f"as discarded across runs {new_runs} (fork {result.run_id})")


@examples(30)
@given(case=graph_cases(SUBGRAPHS))
def test_strict_replay_of_an_unchanged_run_with_subgraphs_succeeds_without_a_call(
        case: Any) -> None:
    h = Harness()
    base = record_case(case, h)
    h.counter.reset()

    state = replay(base.run_id, store=base.store, strict=True, env=h.env)

    assert h.counter.total == 0
    assert same_outcome(state, base.state), show(base.state, state)


@examples(30)
@given(case=graph_cases(SUBGRAPHS), data=st.data())
def test_a_case_saved_from_a_fork_with_subgraphs_passes(case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")
    result = fork(base, at="start", change=item, hitl=hitl, ignore_budget=True,
                  policy={"side_effects": {"allow": True},
                          "memoize": data.draw(st.booleans(), label="memoize")})
    assume(result.state.finished)
    memory = result.state.memory
    criteria = [Condition(key=k, op="eq", value=memory[k]) for k in sorted(memory)[:4]]
    saved = save_case(result.run_id, name="sub", store=base.store, criteria=criteria)
    h.counter.reset()

    outcome = run_case(saved)

    assert outcome.passed, outcome.failures
    assert h.counter.total == 0


def _new_child_version(store: Store, child: GraphSpec) -> GraphSpec:
    wire = child.to_wire()
    first = wire["nodes"][0]
    if first["kind"] == "tool":
        first["params"] = {**first["params"], "salt": first["params"]["salt"] + 10}
    else:
        agent = first["agent"] if isinstance(first["agent"], dict) else wire["agents"][first["agent"]]
        agent["system_prompt"] = "A new child version."
    changed = parse_graph(wire)
    assert store.save_graph(changed) == 2
    return changed


def _first_subgraph(state: RunState, graph: GraphSpec) -> Execution | None:
    return next((e for e in state.executions if e.kind == "subgraph" and e.status == "completed"
                 and isinstance(graph.node(e.node), SubgraphNode)), None)


@examples(30)
@given(case=graph_cases(SUBGRAPHS))
def test_a_new_child_graph_version_is_never_served_the_old_childs_recording(case: Any) -> None:
    h = Harness()
    base = record_case(case, h)
    ex = _first_subgraph(base.state, case.graph)
    assume(ex is not None)
    node = case.graph.node(ex.node)
    child = next(c for c in case.children if c.id == node.graph)
    _new_child_version(base.store, child)

    memoized = fork(base, at="start", hitl=hitl, ignore_budget=True,
                    policy={"memoize": True, "side_effects": {"allow": True}})
    guarded = fork(base, at="start", hitl=hitl, ignore_budget=True)
    fresh = run_recorded(case.graph, dict(case.input), store=base.store, env=h.env, hitl=hitl)

    assert same_outcome(memoized.state, fresh.state), show(fresh.state, memoized.state)
    assert guarded.state.status == "blocked", (
        f"{ex.node!r} runs child graph version 2 now; the replay guard served version 1's "
        "recording")
    assert guarded.state.suppressed_effects[0]["node"] == ex.node


__all__ = ["AgentNode", "child_runs"]
