"""Property tests over random changes at random points of random scenarios."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forklab.engine import change, fork, fork_points
from forklab.engine.canonical import canonical_equals
from tests.engine.fork.helpers import NAMES, record, world

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(alphabet="abc xyz", max_size=8),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(alphabet="abc", max_size=4), inner, max_size=3),
    max_leaves=6)

RECORDED = {name: record(name) for name in NAMES}


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_memory_change_survives_to_the_end_unless_a_later_node_overwrites_it(data) -> None:
    name = data.draw(st.sampled_from(NAMES), label="scenario")
    base = RECORDED[name]
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    key = data.draw(st.sampled_from(sorted({*base.state.memory, "extra"})), label="key")
    value = data.draw(JSON_VALUES, label="value")
    before = world()

    result = fork(base, at={"sequence": point.seq}, change=change.memory(set={key: value}),
                  policy={"memoize": data.draw(st.booleans(), label="memoize")},
                  ignore_budget=True)

    state = result.state
    assert world() == before, "a default fork performed a real write"
    skip = state.prefix_executions
    prefix, tail = state.executions[:skip], state.executions[skip:]
    assert [(e.node, e.occurrence) for e in prefix] == [
        (e.node, e.occurrence) for e in base.state.executions if e.start_seq <= point.seq]
    assert all(e.start_seq > result.event_log[1].seq for e in tail)
    if not any(key in e.writes or key in e.deletes for e in tail):
        assert key in state.memory
        assert canonical_equals(state.memory[key], value)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_setting_a_key_to_its_own_value_with_memoize_is_a_null_fork(data) -> None:
    name = data.draw(st.sampled_from(NAMES), label="scenario")
    base = RECORDED[name]
    points = fork_points(base.event_log)
    point = data.draw(st.sampled_from(points), label="point")
    prefix = fork(base, at={"sequence": point.seq}, dry_run=True).prefix_state
    # a value set by a change is trusted, so a tainted key set to itself is a real change
    key = data.draw(st.sampled_from(sorted(set(prefix.memory) - prefix.taint)), label="key")

    result = fork(base, at={"sequence": point.seq}, policy={"memoize": True},
                  change=change.memory(set={key: prefix.memory[key]}))

    assert all(c["label"] == "reused" for c in result.calls), result.calls
    assert canonical_equals(result.state.outcome(), base.state.outcome())


def test_a_memory_change_clears_the_taint_of_the_key_it_sets() -> None:
    base = RECORDED["research-web"]

    result = fork(base, at={"before_node": "extract"}, policy={"memoize": True},
                  change=change.memory(set={"page": base.state.memory["page"]}))

    assert "page" in base.state.taint
    assert result.state.taint == set()
    assert result.state.memory == base.state.memory
