"""A fork of a fork is a fork of its root with the changes combined (issue 8 point 4).

Every point form resolves in the fork's logical run (its inherited prefix and its own tail):
``start`` re-runs the whole graph, inherited nodes are addressable, and forking at an
inherited point is forking the root there with the lineage's changes re-applied. The new
fork records the combined changes; ``promote`` adopts every ancestor's config changes.
"""

from __future__ import annotations

import pytest

from forklab.engine import change, fork, fork_points, promote
from forklab.engine.canonical import canonical_equals
from forklab.engine.errors import ConflictingChanges, ForkPointNotFound
from forklab.engine.recording import run_recorded
from tests.engine.fork.helpers import labels, record


def _terse_fork():
    base = record("research-write")
    first = fork(base, at={"before_node": "write"}, change=change.prompt("write", "Be terse."))
    return base, first


def _again(base, run_id, **options):
    return fork(run_id, store=base.store, env=base.env, **options)


def test_the_fork_points_of_a_fork_list_its_inherited_prefix_with_the_run_holding_it() -> None:
    base, first = _terse_fork()

    points = fork_points(first.event_log)

    assert [(p.node, p.run_id) for p in points] == [
        ("research", base.run_id), ("write", first.run_id), (None, first.run_id)]
    assert points[0].seq == 1
    assert points[0].to_wire()["run_id"] == base.run_id
    assert fork_points(first.event_log, store=base.store) == points


def test_start_on_a_fork_re_runs_the_whole_graph() -> None:
    base, first = _terse_fork()

    result = _again(base, first.run_id, at="start", change=change.prompt("research", "Short."))

    assert result.point.run_id == base.run_id
    assert result.prefix_state.executions == []
    assert labels(result.calls) == [("research", "agent", "changed"),
                                    ("write", "agent", "changed")]
    requested = [e for e in result.event_log if e.type == "agent.requested"]
    assert [r.system_prompt for r in requested][1] == "Be terse."


def test_an_inherited_node_is_addressable_on_a_fork() -> None:
    base, first = _terse_fork()

    result = _again(base, first.run_id, at={"before_node": "research"}, dry_run=True)

    assert (result.point.node, result.point.run_id, result.point.seq) == (
        "research", base.run_id, 1)


def test_an_inherited_boundary_is_addressed_by_sequence_and_run_id() -> None:
    base, first = _terse_fork()

    by_address = _again(base, first.run_id, at={"sequence": 1, "run_id": base.run_id},
                        dry_run=True)
    by_cli = _again(base, first.run_id, at=f"seq:1@{base.run_id}", dry_run=True)

    assert by_address.point == by_cli.point == fork_points(first.event_log)[0]
    with pytest.raises(ForkPointNotFound) as raised:
        _again(base, first.run_id, at={"sequence": 6, "run_id": base.run_id}, dry_run=True)
    assert "seqs 1 of that run" in raised.value.message


def test_forking_a_fork_at_an_inherited_point_is_forking_the_root_with_both_changes() -> None:
    base, first = _terse_fork()
    second = change.temperature("research", 0.9)

    via_fork = _again(base, first.run_id, at="start", change=second)
    via_root = fork(base, at="start", change=[change.prompt("write", "Be terse."), second])

    assert canonical_equals(via_fork.state.outcome(), via_root.state.outcome())
    assert via_fork.state.parent_run_id == first.run_id
    assert via_fork.changes == via_fork.state.changes == [
        change.prompt("write", "Be terse.").wire(), second.wire()]
    assert via_fork.diff.changes == [second.describe()]


def test_state_changes_of_an_ancestor_are_applied_at_an_inherited_point() -> None:
    base = record("research-write")
    first = fork(base, at={"before_node": "write"}, change=change.memory(set={"notes": "N"}))

    result = _again(base, first.run_id, at="start", policy={"memoize": True})

    # research re-runs (memoized) and writes its notes; the ancestor's memory change is then
    # applied at the start, before it — so research's own write wins, as in fork(root, start)
    direct = fork(base, at="start", change=change.memory(set={"notes": "N"}),
                  policy={"memoize": True})
    assert canonical_equals(result.state.outcome(), direct.state.outcome())


def test_a_forks_own_part_continues_under_its_changes() -> None:
    base, first = _terse_fork()

    result = _again(base, first.run_id, at={"before_node": "write"}, policy={"memoize": True})

    assert result.point.run_id == first.run_id
    assert labels(result.calls) == [("write", "agent", "reused")]
    assert canonical_equals(result.state.outcome(), first.state.outcome())


def test_an_input_patch_read_in_the_inherited_prefix_moves_the_point_back_into_it() -> None:
    base = record("research-write")
    first = fork(base, at={"before_node": "write"}, change=change.prompt("write", "Be terse."))

    result = _again(base, first.run_id, at={"before_node": "write"},
                    change=change.input_patch({"goal": "Explain tides"}))

    assert result.point.run_id == first.run_id
    assert result.effective_fork_sequence_id == 1
    assert result.fork_node_id == "research"
    assert labels(result.calls) == [("research", "agent", "changed"),
                                    ("write", "agent", "changed")]
    requested = [e for e in result.event_log if e.type == "agent.requested"]
    assert requested[1].system_prompt == "Be terse."
    assert result.state.input["goal"] == "Explain tides"


def test_a_change_refining_an_ancestors_change_replaces_it() -> None:
    base, first = _terse_fork()

    result = _again(base, first.run_id, at={"before_node": "write"},
                    change=change.prompt("write", "Be verbose."))

    requested = [e for e in result.event_log if e.type == "agent.requested"]
    assert [r.system_prompt for r in requested] == ["Be verbose."]
    with pytest.raises(ConflictingChanges):
        _again(base, first.run_id, at={"before_node": "write"}, change=[
            change.prompt("write", "A"), change.prompt("write", "B")])


def test_promote_of_a_fork_of_a_fork_carries_every_ancestors_changes() -> None:
    base, first = _terse_fork()
    second = _again(base, first.run_id, at={"before_node": "write"},
                    change=change.temperature("write", 0.1))

    promoted = promote(second.run_id, store=base.store)

    graph = base.store.load_graph("research-write", promoted.version)
    agent = graph.node("write").agent
    assert (agent.system_prompt, agent.temperature) == ("Be terse.", 0.1)
    assert [c["kind"] for c in promoted.promoted] == ["prompt", "temperature"]
    rerun = run_recorded(graph, dict(second.state.input), env=base.env)
    assert canonical_equals(rerun.state.memory, second.state.memory)


def test_promote_applies_a_refinement_after_what_it_refines() -> None:
    base, first = _terse_fork()
    second = _again(base, first.run_id, at={"before_node": "write"},
                    change=change.prompt("write", "Be verbose."))

    promoted = promote(second.run_id, store=base.store)

    graph = base.store.load_graph("research-write", promoted.version)
    assert graph.node("write").agent.system_prompt == "Be verbose."
