"""Invariant 7 — every call is accounted (SPEC §3.4; semantics "Labels", "Budgets").

Every real model or tool execution of a fork's tail — counted where it happens, including
inside subgraphs and including a tool call that raised — is listed in ``calls`` with a paying
label (``live``/``changed``); each call is labelled by its own cause; the cost cap is checked
before each call so it is never overshot by more than one call; an unpriced call is reported
as unpriced, never as $0 or a saving.
"""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points
from forklab.engine.actions import AgentAnswer, ChildOutcome, ToolCall, ToolResult
from forklab.engine.errors import LiveBudgetExceeded, UnpricedModel
from forklab.engine.fork.changes import OutputChange, ToolChange, parse_changes
from forklab.engine.graph import ToolNode
from forklab.engine.reducers import fold
from forklab.engine.state import Execution, RunState
from forklab.engine.store import Store
from tests.engine.properties.changes import changes, targets_of
from tests.engine.properties.graphs import Options, graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import FLAKY_TOOL, UNPRICED_MODEL, Harness, hitl

PAID = ("live", "changed")
POLICIES = st.sampled_from(["replay", {"allow": True}])
FLAKY = Options(segments=("single", "diamond", "loop"), singles=("tool", "tool", "agent"))
RAISING = Options(segments=FLAKY.segments, singles=FLAKY.singles, flaky_weight=4)
"""FLAKY with flaky tools drawn four times as often: the raised-call property needs a base
that failed at one (about 1 graph in 8 with FLAKY; every other one is generated, recorded and
thrown away)."""


def paid_calls(store: Store, state: RunState, before: set[str]) -> list[Any]:
    """The tail's paid calls in order, a live subgraph call replaced by its child's."""
    children = {a.child_run_id: a for ex in state.executions for a in ex.actions
                if isinstance(a, ChildOutcome) and a.child_run_id not in before}
    start = state.tail_from_call
    calls: list[Any] = []
    for call in state.calls[start:]:
        if call.kind == "subgraph":
            child = next((c for c, a in children.items() if a.seq == call.seq), None)
            if child is not None:
                calls += paid_calls(store, fold(store.read(child)), before)
        elif call.label in PAID and call.kind in ("agent", "tool"):
            calls.append(call)
    return calls


def _fork(data: st.DataObject, case: Any, h: Harness, **extra: Any) -> tuple[Any, Any, set[str]]:
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    policy = {"memoize": data.draw(st.booleans(), label="memoize"),
              "side_effects": data.draw(POLICIES, label="side_effects")}
    before = set(base.store.run_ids())
    h.counter.reset()
    result = fork(base, at={"sequence": point.seq}, change=item, policy=policy, hitl=hitl,
                  **({"ignore_budget": True} | extra))
    return base, result, before


@examples(80)
@given(case=st.one_of(graph_cases(), graph_cases(FLAKY)), data=st.data())
def test_every_real_call_of_a_tail_is_listed_with_a_paying_label(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base, result, before = _fork(data, case, h)

    listed = paid_calls(base.store, result.state, before)

    real = [("agent", r.model) for r in h.counter.model_calls] + [
        ("tool", node) for _, node in h.counter.tool_calls]
    assert len(listed) == len(real), (
        f"{len(real)} real call(s) {real}; listed as paid: "
        f"{[(c.node, c.kind, c.label) for c in listed]}")


@examples(40)
@given(case=graph_cases(RAISING), data=st.data())
def test_a_tool_call_that_raised_in_the_tail_is_listed_and_counted(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    assume(base.state.status == "failed")
    failed = base.state.executions[-1]
    assume(failed.kind == "tool" and case.graph.node(failed.node).tool == FLAKY_TOOL)
    h.counter.reset()

    result = fork(base, at="failure", hitl=hitl, ignore_budget=True,
                  policy={"memoize": data.draw(st.booleans(), label="memoize")})

    assert result.state.status == "failed"
    raised = [c for c in result.calls if c["node"] == failed.node and c["kind"] == "tool"]
    if h.counter.tool_calls:  # it really ran again (memoize off, or a memo miss)
        assert [c["label"] for c in raised] == ["live"], result.calls
        assert len(paid_calls(base.store, result.state, set())) == h.counter.total


def _recorded(state: RunState) -> dict[tuple[str, int], Execution]:
    return {(e.node, e.occurrence): e for e in state.executions}


def _recorded_hash(ex: Execution | None, kind: str, role: Any, index: Any) -> str | None:
    for action in ex.actions if ex is not None else ():
        if kind == "agent" and isinstance(action, AgentAnswer) and (
                action.role, action.index) == (role, index):
            return action.request_hash
        if kind == "tool" and isinstance(action, ToolCall):
            return action.args_hash
    return None


def expected_label(*, memoize: bool, targeted: bool, recorded: str | None,
                   actual: str) -> str | None:
    """semantics.md "Labels" (None: the rule leaves it open)."""
    if memoize:
        if recorded == actual:
            return "reused"
        if recorded is None:
            return None if targeted else "live"
        return "changed"
    if targeted or (recorded is not None and recorded != actual):
        return "changed"
    return "live"


@examples(80)
@given(case=graph_cases(), data=st.data())
def test_each_call_is_labelled_by_its_own_cause(case: Any, data: st.DataObject) -> None:
    h = Harness()
    base, result, _ = _fork(data, case, h)
    items = parse_changes(result.changes)
    targets = targets_of(items)
    substituted = {c.node for c in items if isinstance(c, (OutputChange, ToolChange))}
    memoize = bool(base.store.read(result.run_id)[1].memoize)  # run.forked: as it ran
    recorded = _recorded(base.state)
    skip = result.state.prefix_executions
    for ex in result.state.executions[skip:]:
        node = case.graph.node(ex.node)
        pending_args = None
        for action in ex.actions:
            role = action.role if isinstance(action, AgentAnswer) else None
            index = action.index if isinstance(action, AgentAnswer) else None
            where = f"{ex.node}#{ex.occurrence} {role}[{index}]"
            if isinstance(action, ToolCall):
                pending_args = action.args_hash
                continue
            if not isinstance(action, (AgentAnswer, ToolResult)):
                continue
            label = action.label
            if ex.memo:
                assert label == "reused", (where, label)
                continue
            if ex.node in substituted:
                assert label == "simulated", (where, label)
                continue
            kind = "agent" if isinstance(action, AgentAnswer) else "tool"
            if kind == "tool" and isinstance(node, ToolNode) and node.effect == "write" and \
                    label not in PAID:
                assert label == "reused", (where, label)
                continue
            actual = action.request_hash if isinstance(action, AgentAnswer) else pending_args
            want = expected_label(
                memoize=memoize,
                targeted=any(t.covers(ex.node, role, index) for t in targets),
                recorded=_recorded_hash(recorded.get((ex.node, ex.occurrence)), kind,
                                        role, index),
                actual=str(actual))
            if want is not None:
                assert label == want, f"{where}: labelled {label!r}, expected {want!r}"


@examples(60)
@given(case=graph_cases(), data=st.data())
def test_the_cost_cap_is_never_overshot_by_more_than_one_call(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")
    policy = {"memoize": data.draw(st.booleans(), label="memoize"),
              "side_effects": data.draw(POLICIES, label="side_effects")}
    run = {"at": "start", "change": item, "policy": policy, "hitl": hitl}
    estimate = fork(base, dry_run=True, ignore_budget=True, **run).estimate.cost_usd
    cap = round(estimate * data.draw(st.sampled_from([0.5, 1.0, 1.2, 2.0]), label="x"), 8)
    before = set(base.store.run_ids())
    try:
        result = fork(base, budget={"max_live_calls": None, "max_cost_usd": cap}, **run)
    except LiveBudgetExceeded:
        assert estimate > cap
        return

    costs = [c.cost_usd or 0.0 for c in paid_calls(base.store, result.state, before)]
    assert sum(costs[:-1]) <= cap + 1e-12, (
        f"cap ${cap}: spent ${sum(costs):.8f} over {len(costs)} calls "
        f"(${sum(costs[:-1]):.8f} before the last)")


UNPRICED = Options(unpriced=True, unpriced_weight=3)
"""The unpriced model is as likely as the three priced ones together: both unpriced
properties reject a run that never called it."""


@examples(40)
@given(case=graph_cases(UNPRICED), data=st.data())
def test_an_unpriced_call_is_reported_unpriced_never_as_zero_or_a_saving(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")

    result = fork(base, at="start", change=item, hitl=hitl, ignore_budget=True,
                  budget={"max_live_calls": None, "max_cost_usd": None})

    unpriced = [c for c in result.calls if c["model"] == UNPRICED_MODEL and c["label"] in PAID]
    assert all(c["cost_usd"] is None for c in unpriced), unpriced
    assume(unpriced)
    assert "unpriced" in result.explain(), result.explain()
    paid = [c for c in result.calls if c["label"] in PAID and c["kind"] == "agent"]
    if all(c["model"] == UNPRICED_MODEL for c in paid):
        assert result.incurred_cost_usd != 0.0, "an unpriced tail reported as $0 incurred"
    delta = result.diff.cost["usd_delta"] if result.diff else None
    assert not (isinstance(delta, (int, float)) and delta <= 0 and result.state.unpriced_calls
                > base.state.unpriced_calls), f"unpriced calls shown as a saving: {delta}"


@examples(30)
@given(case=graph_cases(UNPRICED))
def test_a_cost_budget_refuses_a_tail_that_would_call_an_unpriced_model(case: Any) -> None:
    h = Harness()
    base = record_case(case, h)
    assume(any(c.model == UNPRICED_MODEL for c in base.state.calls))
    h.counter.reset()
    try:
        fork(base, at="start", hitl=hitl, budget={"max_live_calls": None, "max_cost_usd": 5.0})
    except UnpricedModel as refused:
        assert UNPRICED_MODEL in refused.message
        assert h.counter.total == 0
        return
    raise AssertionError("a tail calling an unpriced model ran under a cost budget")
