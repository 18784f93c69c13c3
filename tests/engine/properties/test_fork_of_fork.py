"""Invariant 4 — a fork of a fork is a fork of its root with the changes combined (SPEC §3.2,
§3.9; semantics "Forks of forks").

- fork(F, at=P, c2) with P in F's inherited prefix ≡ fork(root, at=P, c1 + c2);
- with P in F's own part ≡ fork(root, at=F's point, c1 + c2) when c2 bites after P;
- a change in c2 writing what an ancestor's change wrote replaces it (a refinement);
- every form addresses the whole logical run (``start`` re-runs the graph); an input patch
  read in the inherited prefix moves the point back the same way;
- the new fork records the ancestors' changes then its own, its parent is F, its diff is
  against F; ``promote`` carries every ancestor's config changes and the promoted graph
  reproduces the fork when re-run.
"""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points, promote
from forklab.engine.canonical import canonical_equals
from forklab.engine.recording import run_recorded
from tests.engine.properties.changes import (
    CONFIG_KINDS,
    KINDS,
    changes,
    first_affected,
    node_of,
)
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.lineage import (
    independent_change,
    index_of_first_affected,
    named,
)
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import assert_fold_matches, record_case, same_outcome, show
from tests.engine.properties.world import Harness, hitl

STATE_AND_CONFIG = tuple(k for k in KINDS if k != "input_patch")


def _first_fork(data: st.DataObject, case: Any, h: Harness, kinds: tuple[str, ...],
                before_it_bites: bool = False, policy: dict[str, Any] | None = None,
                ) -> tuple[Any, Any, Any, dict[str, Any]]:
    base = record_case(case, h)
    c1 = data.draw(changes(case.graph, base.state, kinds), label="c1")
    limit = first_affected(c1, case.graph, base.state) if before_it_bites else None
    points = [p for p in fork_points(base.event_log) if limit is None or p.seq < limit.start_seq]
    p1 = data.draw(st.sampled_from(points), label="p1")
    policy = policy or {"memoize": data.draw(st.booleans(), label="memoize"),
                        "side_effects": data.draw(st.sampled_from(["replay", {"allow": True}]),
                                                  label="side_effects")}
    first = fork(base, at={"sequence": p1.seq}, change=c1, policy=policy, hitl=hitl,
                 ignore_budget=True)
    assume(first.state.finished)
    return base, c1, first, policy


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_a_fork_of_a_fork_at_an_inherited_point_is_the_root_fork_with_both_changes(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base, c1, first, policy = _first_fork(data, case, h, STATE_AND_CONFIG)
    inherited = first.state.executions[:first.state.prefix_executions]
    assume(inherited)
    at = data.draw(st.sampled_from(["start"] + [named(e) for e in inherited[1:]]), label="p2")
    c2 = data.draw(independent_change(case.graph, first.state, c1, STATE_AND_CONFIG),
                   label="c2")

    second = fork(first.run_id, store=base.store, env=h.env, at=at, change=c2, policy=policy,
                  hitl=hitl, ignore_budget=True)
    combined = fork(base, at=at, change=[c1, c2], policy=policy, hitl=hitl, ignore_budget=True)

    assert same_outcome(second.state, combined.state), show(combined.state, second.state)
    assert canonical_equals(second.state.changes, [c1.wire(), c2.wire()])
    assert second.state.parent_run_id == first.run_id == second.base_run_id
    assert same_outcome(second.base_state, first.state), "the diff is not against the parent"
    assert_fold_matches(base.store, second.state)


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_a_fork_of_a_fork_at_its_own_point_is_the_root_fork_with_both_changes(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base, c1, first, policy = _first_fork(data, case, h, STATE_AND_CONFIG)
    skip = first.state.prefix_executions
    own = first.state.executions[skip:]
    assume(own)
    c2 = data.draw(independent_change(case.graph, first.state, c1, STATE_AND_CONFIG),
                   label="c2")
    # a point of its own at or before where c2 first bites (drawn among those, rather than
    # drawn anywhere and the example thrown away when it lies after)
    bites = index_of_first_affected([c2], case.graph, first.state)
    before = [e for i, e in enumerate(first.state.executions[skip:], skip)
              if bites is None or bites >= i]
    assume(before)
    p2 = data.draw(st.sampled_from(before), label="p2")

    second = fork(first.run_id, store=base.store, env=h.env, at={"sequence": p2.start_seq - 1},
                  change=c2, policy=policy, hitl=hitl, ignore_budget=True)
    combined = fork(base, at={"sequence": first.fork_sequence_id}, change=[c1, c2],
                    policy=policy, hitl=hitl, ignore_budget=True)

    assert same_outcome(second.state, combined.state), show(combined.state, second.state)
    assert canonical_equals(second.state.changes, [c1.wire(), c2.wire()])
    assert second.state.parent_run_id == first.run_id
    assert_fold_matches(base.store, second.state)


def _refinement(draw: Any, case: Any, state: Any, c1: Any) -> Any:
    """A change of c1's kind writing the same thing c1 wrote, with another value."""
    return draw(changes(case.graph, state, (c1.kind,)).filter(
        lambda c: c.wire() != c1.wire() and _same_thing(c, c1)))


def _same_thing(a: Any, b: Any) -> bool:
    fields = {"model": "target", "prompt": "target", "temperature": "target", "output": "node",
              "tool": "node", "route": "source"}
    if a.kind in fields:
        return bool(getattr(a, fields[a.kind]) == getattr(b, fields[b.kind]))
    if a.kind == "memory":
        return bool(set(a.set) | set(a.delete) == set(b.set) | set(b.delete))
    return a.kind == "human_response"


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_a_change_writing_what_an_ancestors_change_wrote_replaces_it(
        case: Any, data: st.DataObject) -> None:
    kinds = ("model", "prompt", "temperature", "memory", "route", "output", "tool",
             "human_response")
    h = Harness()
    base, c1, first, policy = _first_fork(data, case, h, kinds)
    inherited = first.state.executions[:first.state.prefix_executions]
    at = data.draw(st.sampled_from(["start"] + [named(e) for e in inherited[1:]]), label="p2")
    c2 = _refinement(data.draw, case, first.state, c1)
    note_ = f"{c1.describe()} refined by {c2.describe()}"

    second = fork(first.run_id, store=base.store, env=h.env, at=at, change=c2, policy=policy,
                  hitl=hitl, ignore_budget=True)
    alone = fork(base, at=at, change=c2, policy=policy, hitl=hitl, ignore_budget=True)

    assert same_outcome(second.state, alone.state), note_ + "\n" + show(alone.state,
                                                                       second.state)


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_the_points_of_a_fork_are_the_boundaries_of_its_logical_run(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base, _, first, _ = _first_fork(data, case, h, STATE_AND_CONFIG)
    skip = first.state.prefix_executions

    points = fork_points(first.event_log)

    before_nodes = [p for p in points if p.kind == "before_node"]
    assert [(p.node, p.occurrence, p.iteration) for p in before_nodes] == [
        (e.node, e.occurrence, e.iteration) for e in first.state.executions]
    for p, ex in zip(before_nodes, first.state.executions, strict=True):
        holder = base.run_id if first.state.executions.index(ex) < skip else first.run_id
        assert p.to_wire().get("run_id") == holder, (p.to_wire(), holder)
        assert p.seq == ex.start_seq - 1


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_an_input_patch_on_a_fork_means_its_root_had_started_with_that_input(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base, c1, first, policy = _first_fork(data, case, h, CONFIG_KINDS, before_it_bites=True)
    at = data.draw(st.sampled_from(["start"] + [named(e) for e in first.state.executions[1:]]),
                   label="p2")
    patch = data.draw(changes(case.graph, base.state, ("input_patch",)), label="patch")

    second = fork(first.run_id, store=base.store, env=h.env, at=at, change=patch,
                  policy=policy, hitl=hitl, ignore_budget=True)
    combined = fork(base, at="start", change=[c1, patch], policy=policy, hitl=hitl,
                    ignore_budget=True)

    assert same_outcome(second.state, combined.state), show(combined.state, second.state)


@examples(30)
@given(case=graph_cases(), data=st.data())
def test_promoting_a_fork_of_a_fork_carries_every_change_and_reproduces_it_when_re_run(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    policy = {"side_effects": {"allow": True}}
    base, c1, first, _ = _first_fork(data, case, h, CONFIG_KINDS, before_it_bites=True,
                                     policy=policy)
    c2 = data.draw(independent_change(case.graph, first.state, c1, CONFIG_KINDS), label="c2")
    bites = index_of_first_affected([c2], case.graph, first.state)
    at = data.draw(st.sampled_from(
        ["start"] + [named(e) for i, e in enumerate(first.state.executions)
                     if i and (bites is None or i <= bites)]), label="p2")
    second = fork(first.run_id, store=base.store, env=h.env, at=at, change=c2, policy=policy,
                  hitl=hitl, ignore_budget=True)
    assume(second.state.status in ("completed", "failed"))

    # each change was taken before it bites: its node ran under it or never ran at all, and
    # promote carries exactly the ones whose node ran (issue 35, class 3)
    ran = {ex.node for ex in second.state.executions}
    applied = [c for c in (c1, c2) if node_of(c) in ran]
    assume(applied)

    promoted = promote(second.run_id, store=base.store, only_applied=True)

    assert canonical_equals(promoted.promoted, [c.wire() for c in applied])
    graph = base.store.load_graph(case.graph.id, promoted.version)
    rerun = run_recorded(graph, second.state.input, store=base.store, env=h.env, hitl=hitl)
    assert canonical_equals(rerun.state.memory, second.state.memory), show(second.state,
                                                                           rerun.state)
