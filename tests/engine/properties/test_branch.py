"""``RunState.branch()`` over generated runs (issue 11: a live fork branches its folded
prefix instead of decoding its wire form).

- a branch is canonically the state it was taken from, at every seq of a run's log (inside
  a node too: an open ``current``);
- folding the rest of the log into the branch gives the whole log's fold, and leaves the
  state it was taken from exactly as it was (nothing the reducers edit is shared);
- folding on into the state a branch was taken from leaves the branch as it was, so a
  whole log's fold can keep waypoints (``fold_with_waypoints``) and the state at any seq
  folded on from the nearest (``fold_to``) is exactly the fold up to that seq;
- every container slot of a state is either copied by ``branch`` or one the reducers
  replace whole (a new slot has to be classified).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine.canonical import canonical_equals, canonical_json
from forklab.engine.reducers import WAYPOINTS, fold, fold_to, fold_with_waypoints
from forklab.engine.state import _EDITED_IN_PLACE, RunState
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import Harness


@examples(30)
@given(case=graph_cases(), data=st.data())
def test_a_branch_folds_on_to_the_whole_log_and_leaves_its_origin_unchanged(
        case: Any, data: st.DataObject) -> None:
    events = record_case(case, Harness()).event_log
    whole = canonical_json(fold(events).to_wire())
    at = data.draw(st.integers(min_value=1, max_value=len(events)), label="seq")
    origin = fold(events[:at])
    before = canonical_json(origin.to_wire())

    branch = origin.branch()

    assert canonical_json(branch.to_wire()) == before
    assert canonical_json(fold(events[at:], branch).to_wire()) == whole
    assert canonical_json(origin.to_wire()) == before
    kept = origin.branch()
    fold(events[at:], origin)
    assert canonical_json(kept.to_wire()) == before


@examples(30)
@given(case=graph_cases(), data=st.data())
def test_the_state_at_any_seq_folded_from_a_waypoint_is_the_fold_up_to_it(
        case: Any, data: st.DataObject) -> None:
    events = record_case(case, Harness()).event_log
    final, waypoints = fold_with_waypoints(events)
    assert canonical_json(final.to_wire()) == canonical_json(fold(events).to_wire())
    assert len(waypoints) < WAYPOINTS
    assert [w.version for w in waypoints] == sorted({w.version for w in waypoints})
    for seq in data.draw(st.lists(st.integers(min_value=1, max_value=len(events)),
                                  min_size=1, max_size=4), label="seqs"):
        expected = canonical_json(fold(events[:seq]).to_wire())
        assert canonical_json(fold_to(events, seq, waypoints).to_wire()) == expected
        assert canonical_json(fold_to(events, seq).to_wire()) == expected
    # the waypoints are unchanged by what was folded on from them
    again = fold_with_waypoints(events)[1]
    assert [canonical_json(w.to_wire()) for w in waypoints] == [
        canonical_json(w.to_wire()) for w in again]


def test_every_container_slot_is_copied_or_replaced_whole() -> None:
    containers = {f.name for f in dataclasses.fields(RunState)
                  if f.default_factory in (list, dict, set)}
    # input and changes: replaced by the reducers (``run.started``, ``change.applied``,
    # ``run.forked``), never edited; arrivals: copied with its lists
    assert containers - set(_EDITED_IN_PLACE) == {"input", "changes", "arrivals"}


def test_every_container_slot_of_an_open_execution_is_copied_or_never_edited() -> None:
    from forklab.engine.state import Execution

    containers = {f.name for f in dataclasses.fields(Execution)
                  if f.default_factory in (list, dict)}
    execution = Execution(node="a", kind="agent", occurrence=1, iteration=1, start_seq=2,
                          fingerprint="f", reads={"k": [1]}, started_at=0.0)
    copy = execution.branch()
    copied = {name for name in containers
              if getattr(copy, name) is not getattr(execution, name)}
    # prior_iteration_nodes: replaced by the reducers, never edited; reads: never edited
    assert containers - copied == {"prior_iteration_nodes"}
    assert copy.reads is execution.reads


def test_a_branch_of_a_state_inside_a_node_copies_the_open_execution() -> None:
    state = RunState.from_wire({"current": {
        "node": "a", "kind": "tool", "occurrence": 1, "iteration": 1, "start_seq": 2,
        "fingerprint": "f", "reads": {}, "started_at": 0.0}})
    branch = state.branch()
    assert branch.current is not None and branch.current is not state.current
    branch.current.labels.append("live")
    assert state.current is not None and state.current.labels == []
    assert canonical_equals(RunState().branch().to_wire(), RunState().to_wire())


def test_a_forked_events_prefix_is_in_memory_only() -> None:
    from forklab.engine.events import RunForked, from_wire
    from forklab.engine.reducers import evolve

    prefix = RunState(memory={"k": 1}, version=3)
    event = RunForked(run_id="f", seq=2, base_run_id="b", fork_sequence_id=3,
                      fork_node_id=None, prefix_state=prefix.to_wire(), changes=[], graph={},
                      prefix=prefix)
    wire = event.to_wire()
    assert "prefix" not in wire["payload"]
    assert from_wire(wire).prefix is None and from_wire(wire) == event
    # JSON naming the field is decoded, never branched: the wire prefix is what is folded
    wire["payload"]["prefix"] = {"memory": {"k": 2}}
    assert evolve(RunState(), from_wire(wire)).memory == {"k": 1}
    assert evolve(RunState(), event).memory == {"k": 1}
