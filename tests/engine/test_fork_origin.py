"""A fork's origin (``RunState.fork``) is a typed value whose wire form is the stored one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine.state import ForkOrigin, RunState

ids = st.text("abcdef0123456789", min_size=1, max_size=8)
counts = st.integers(min_value=0, max_value=10_000)
origins = st.builds(
    ForkOrigin, base_run_id=ids, fork_sequence_id=counts, fork_node_id=st.none() | ids,
    fork_group_id=st.none() | ids, tail_from_call=counts, prefix_executions=counts,
    holders=st.lists(st.tuples(ids, counts), min_size=1, max_size=4).map(tuple))


@given(origin=origins)
def test_a_fork_origin_round_trips_through_the_state_wire_form(origin: ForkOrigin) -> None:
    state = RunState(run_id="f", fork=origin, calls=[], executions=[])
    wire = state.to_wire()
    assert wire["fork"]["holders"] == [list(h) for h in origin.holders]
    again = RunState.from_wire(wire)
    assert again.fork == origin
    assert (again.tail_from_call, again.prefix_executions) == (origin.tail_from_call,
                                                                origin.prefix_executions)


def test_a_state_stored_without_holders_has_its_prefix_held_by_its_base() -> None:
    stored = {"base_run_id": "b", "fork_sequence_id": 6, "fork_node_id": "write",
              "fork_group_id": None, "tail_from_call": 2, "prefix_executions": 3}
    assert ForkOrigin.from_wire(stored).holders == (("b", 0),)


def test_a_run_that_is_not_a_fork_inherits_nothing() -> None:
    state = RunState.from_wire({"run_id": "r", "fork": None})
    assert (state.fork, state.tail_from_call, state.prefix_executions) == (None, 0, 0)
