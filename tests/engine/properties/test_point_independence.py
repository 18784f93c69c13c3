"""Invariant 1 — point independence (issue 8; SPEC §3.3 input_patch; semantics "Input patch").

A change whose effect starts in the tail gives the same variant whether the fork is taken at
``start`` or at any later point before the first node it affects. An input patch means "the
run had started with this input", so it gives the same variant from *every* point — the
variant of a fresh run on the patched input — and says when and why its point moved.
"""

from __future__ import annotations

from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from forklab.engine import change, fork, fork_points
from forklab.engine.canonical import canonical_equals, merge_patch
from forklab.engine.fork.estimate import changed_input_keys
from forklab.engine.recording import run_recorded
from tests.engine.properties.changes import KINDS, changes, first_affected
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import (
    assert_fold_matches,
    record_case,
    same_outcome,
    show,
)
from tests.engine.properties.world import Harness, hitl

POLICIES = st.sampled_from(["replay", {"allow": True}])


@examples(60)
@given(case=graph_cases(), data=st.data())
def test_a_change_gives_the_same_variant_from_start_and_from_any_point_before_it_bites(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    kinds = tuple(k for k in KINDS if k != "input_patch")
    item = data.draw(changes(case.graph, base.state, kinds), label="change")
    first = first_affected(item, case.graph, base.state)
    points = [p for p in fork_points(base.event_log)
              if first is None or p.seq <= first.start_seq - 1]
    point = data.draw(st.sampled_from(points), label="point")
    policy = {"memoize": data.draw(st.booleans(), label="memoize"),
              "side_effects": data.draw(POLICIES, label="side_effects")}

    from_start = fork(base, at="start", change=item, policy=policy, hitl=hitl,
                      ignore_budget=True)
    from_point = fork(base, at={"sequence": point.seq}, change=item, policy=policy,
                      hitl=hitl, ignore_budget=True)

    assert same_outcome(from_start.state, from_point.state), (
        f"{item.describe()} from start vs from {point.label}:\n"
        + show(from_start.state, from_point.state))
    assert_fold_matches(base.store, from_point.state)


@examples(60)
@given(case=graph_cases(), data=st.data())
def test_an_input_patch_gives_the_variant_of_a_fresh_run_on_the_patched_input_from_any_point(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(changes(case.graph, base.state, ("input_patch",)), label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    policy = {"memoize": data.draw(st.booleans(), label="memoize"),
              "side_effects": data.draw(POLICIES, label="side_effects")}
    patched = merge_patch(case.input, item.patch)

    result = fork(base, at={"sequence": point.seq}, change=item, policy=policy, hitl=hitl,
                  ignore_budget=True)
    from_start = fork(base, at="start", change=item, policy=policy, hitl=hitl,
                      ignore_budget=True)

    assert canonical_equals(result.state.input, patched)
    assert same_outcome(result.state, from_start.state), (
        f"input patch at {point.label} vs at start:\n" + show(from_start.state, result.state))
    if policy["side_effects"] != "replay":  # a fresh run performs its writes: so must the fork
        fresh = run_recorded(case.graph, patched, store=base.store, env=h.env, hitl=hitl)
        assert same_outcome(result.state, fresh.state), (
            f"input patch at {point.label} vs a fresh run:\n" + show(fresh.state, result.state))


@examples(60)
@given(case=graph_cases(), data=st.data())
def test_an_input_patch_read_before_the_point_moves_it_before_the_first_reader_and_says_so(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(changes(case.graph, base.state, ("input_patch",)), label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    changed = changed_input_keys(case.input, merge_patch(case.input, item.patch))
    readers = [(e, sorted(changed & set(case.graph.node(e.node).reads)))
               for e in base.state.executions if e.start_seq <= point.seq]
    readers = [(e, keys) for e, keys in readers if keys]

    result = fork(base, at={"sequence": point.seq}, change=item, hitl=hitl, ignore_budget=True)

    if not readers:
        assert result.effective_fork_sequence_id == point.seq, "no prefix node read the patch"
        return
    reader, keys = readers[0]
    assert result.effective_fork_sequence_id == reader.start_seq - 1, (
        f"{reader.node!r} (declared reads {case.graph.node(reader.node).reads}) read "
        f"{keys} before {point.label}")
    said = [w for w in result.warnings if reader.node in w and any(k in w for k in keys)]
    assert said, f"no warning names {reader.node!r} and {keys}: {result.warnings}"
    assert any(_names_point(w, point.seq, point.label) for w in said), said
    assert any(w in result.explain() for w in said), result.explain()


def _names_point(text: str, seq: int, label: str) -> bool:
    return f"seq {seq}" in text or label in text


@examples(60)
@given(case=graph_cases(), data=st.data())
def test_a_patched_key_a_prefix_node_overwrote_without_reading_keeps_that_nodes_value(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    prefix = [e for e in base.state.executions if e.start_seq <= point.seq]
    read = {k for e in prefix for k in case.graph.node(e.node).reads}
    overwritten = sorted({k for e in prefix for k in e.writes} - read)
    assume(overwritten)
    key = data.draw(st.sampled_from(overwritten), label="key")
    value = data.draw(st.sampled_from(["patched", 42, {"n": 9}]), label="value")
    item = change.input_patch({key: value})

    result = fork(base, at={"sequence": point.seq}, change=item, hitl=hitl, ignore_budget=True,
                  policy={"memoize": True})

    assert result.effective_fork_sequence_id == point.seq, "no prefix node read the patch"
    tail = result.state.executions[len(prefix):]
    if not any(key in e.writes or key in e.deletes for e in tail):
        writer = [e for e in prefix if key in e.writes][-1]
        assert canonical_equals(result.state.memory.get(key), base.state.memory.get(key)), (
            f"{writer.node!r} overwrote {key!r} before the point without reading it; the "
            f"patch clobbered it: {result.state.memory.get(key)!r}")
    assert canonical_equals(result.state.input, merge_patch(case.input, item.patch))
