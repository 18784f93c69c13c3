"""Fork points (SPEC §3.2): every form resolves to one node-start boundary, or explains why not."""

from __future__ import annotations

import pytest

from forklab.engine import fork, fork_points, parse_point, prepare_fork
from forklab.engine.errors import ForkPointMidNode, ForkPointNotFound
from forklab.engine.events import NodeStarted
from tests.engine.fork.helpers import NAMES, record

# review-loop: draft, review, gate, revise, review, gate, revise, review, gate
REVIEW_LOOP_POINTS = [
    (1, "draft", 1, 1), (6, "review", 1, 1), (11, "gate", 1, 1), (14, "revise", 1, 1),
    (19, "review", 2, 2), (24, "gate", 2, 2), (27, "revise", 2, 2), (32, "review", 3, 3),
    (37, "gate", 3, 3), (40, None, None, None),
]


def test_fork_points_list_every_boundary_of_the_review_loop_with_node_occurrence_iteration() -> None:
    base = record("review-loop")

    points = fork_points(base.event_log)

    assert [(p.seq, p.node, p.occurrence, p.iteration) for p in points] == REVIEW_LOOP_POINTS
    assert [p.kind for p in points] == ["before_node"] * 9 + ["end"]
    assert points[4].to_wire() == {
        "seq": 19, "node": "review", "occurrence": 2, "iteration": 2, "kind": "before_node",
        "label": "before 'review' execution 2, iteration 2", "run_id": base.run_id,
        "call": None}


@pytest.mark.parametrize("name", NAMES)
def test_every_listed_point_sits_right_before_the_node_it_names(name: str) -> None:
    base = record(name)
    events = {e.seq: e for e in base.event_log}

    # a point before a call inside an execution shares its node's boundary (SPEC §6.2)
    points = [p for p in fork_points(base.event_log) if p.kind != "before_call"]

    executions = base.state.executions
    assert len([p for p in points if p.kind == "before_node"]) == len(executions)
    for point, execution in zip(points, executions, strict=False):
        started = events[point.seq + 1]
        assert isinstance(started, NodeStarted)
        assert (started.node, started.occurrence, started.iteration) == (
            point.node, point.occurrence, point.iteration) == (
            execution.node, execution.occurrence, execution.iteration)


@pytest.mark.parametrize(("at", "seq", "node", "occurrence", "iteration"), [
    ({"before_node": "review"}, 6, "review", 1, 1),
    ({"before_node": "review", "occurrence": 2}, 19, "review", 2, 2),
    ({"before_node": "review", "occurrence": "last"}, 32, "review", 3, 3),
    ({"after_node": "review", "occurrence": "last"}, 37, "gate", 3, 3),
    ({"after_node": "draft"}, 6, "review", 1, 1),
    ({"before_iteration": 2}, 19, "review", 2, 2),
    ({"before_iteration": 3}, 32, "review", 3, 3),
    ({"before_first_write_of": "verdict"}, 6, "review", 1, 1),
    ({"before_first_read_of": "verdict"}, 11, "gate", 1, 1),
    ({"sequence": 27}, 27, "revise", 2, 2),
    ("start", 1, "draft", 1, 1),
    ("before:review#2", 19, "review", 2, 2),
    ("after:revise#last", 32, "review", 3, 3),
    ("iteration:3", 32, "review", 3, 3),
    ("seq:14", 14, "revise", 1, 1),
])
def test_review_loop_points_resolve_to_the_right_boundary(at, seq, node, occurrence,
                                                          iteration) -> None:
    base = record("review-loop")

    point = prepare_fork(base, at=at).point

    assert (point.seq, point.node, point.occurrence, point.iteration) == (
        seq, node, occurrence, iteration)


def test_a_fork_before_the_second_review_re_executes_it_and_keeps_the_first() -> None:
    base = record("review-loop")

    result = fork(base, at={"before_node": "review", "occurrence": 2},
                  change={"kind": "prompt", "target": "review", "system_prompt": "Approve."})

    assert result.fork_node_id == "review"
    assert result.prefix_state.occurrences == {"draft": 1, "review": 1, "gate": 1, "revise": 1}
    first = result.calls[0]
    assert (first["node"], first["occurrence"], first["label"]) == ("review", 2, "changed")


@pytest.mark.parametrize(("text", "expected"), [
    ("start", "start"),
    ("failure", "failure"),
    ("seq:6", {"sequence": 6}),
    ("before:write", {"before_node": "write"}),
    ("before:write#2", {"before_node": "write", "occurrence": 2}),
    ("after:write#last", {"after_node": "write", "occurrence": "last"}),
    ("iteration:3", {"before_iteration": 3}),
    ("human", {"before_human_input": True}),
    ("first-write:draft", {"before_first_write_of": "draft"}),
    ("first-read:notes", {"before_first_read_of": "notes"}),
    ("version:12", {"version": 12}),
    ("  seq:6 ", {"sequence": 6}),
])
def test_parse_point_reads_every_cli_form(text: str, expected) -> None:
    assert parse_point(text) == expected


@pytest.mark.parametrize("text", ["seq:x", "before:", "somewhere", "iteration:two", "seq:6#2x"])
def test_parse_point_refuses_what_it_cannot_read(text: str) -> None:
    with pytest.raises(ForkPointNotFound) as raised:
        parse_point(text)
    assert raised.value.code == "fork_point_not_found"


@pytest.mark.parametrize(("at", "seq", "node"), [
    ({"before_first_write_of": "draft"}, 6, "write"),
    ({"before_first_read_of": "notes"}, 6, "write"),
    ({"before_first_read_of": "goal"}, 1, "research"),
    ({"after_node": "research"}, 6, "write"),
    ("first-write:notes", 1, "research"),
])
def test_key_based_and_after_node_points_resolve_in_research_write(at, seq, node) -> None:
    point = prepare_fork(record("research-write"), at=at).point
    assert (point.seq, point.node) == (seq, node)


def test_after_the_last_node_is_the_end_boundary() -> None:
    base = record("research-write")

    point = prepare_fork(base, at={"after_node": "write"}).point

    assert (point.seq, point.node, point.kind) == (11, None, "end")


def test_before_human_input_is_the_approval_gate() -> None:
    point = prepare_fork(record("order-fulfilment"), at="human").point
    assert (point.seq, point.node) == (11, "approve")


def test_a_where_predicate_forks_at_the_first_boundary_where_it_holds() -> None:
    base = record("research-write")

    result = fork(base, where=lambda state: "notes" in state.memory, dry_run=True)

    assert (result.fork_sequence_id, result.fork_node_id) == (6, "write")


# -- refusals ------------------------------------------------------------------------------


def test_an_unknown_node_lists_the_nodes_that_ran() -> None:
    with pytest.raises(ForkPointNotFound) as raised:
        prepare_fork(record("triage-router"), at={"before_node": "escalate"})

    assert raised.value.context["nodes_that_ran"] == ["classify", "route", "reply"]
    assert "classify, route, reply" in raised.value.message
    assert "'escalate' never ran" in raised.value.message


def test_an_out_of_range_occurrence_says_how_many_executions_there_were() -> None:
    with pytest.raises(ForkPointNotFound) as raised:
        prepare_fork(record("review-loop"), at={"before_node": "review", "occurrence": 4})

    assert raised.value.context["executions"] == 3
    assert "executed 3 time(s)" in raised.value.message


@pytest.mark.parametrize("seq", [7, 8, 9, 10])
def test_a_sequence_inside_a_node_is_refused_naming_the_node(seq: int) -> None:
    with pytest.raises(ForkPointMidNode) as raised:
        prepare_fork(record("research-write"), at={"sequence": seq})

    assert raised.value.code == "fork_point_mid_node"
    assert raised.value.context["node"] == "write"
    assert "'write'" in raised.value.message
    assert "seq 6 (before it)" in raised.value.message


@pytest.mark.parametrize(("at", "fragment"), [
    ({"sequence": 0}, "before the earliest forkable point"),
    ({"sequence": 500}, "not a node boundary"),
    ({"before_iteration": 4}, "iteration 4 never started"),
    ({"before_first_write_of": "nothing"}, "no node wrote memory key 'nothing'"),
    ({"before_first_read_of": "nothing"}, "no node read memory key 'nothing'"),
    ({"before_human_input": True}, "no approval gate ran"),
    ({"somewhere": 1}, "fork point at: expected exactly one of sequence, before_node"),
    ({"sequence": 6, "before_node": "draft"}, "got sequence, before_node"),
    ({"sequence": 6.0}, "fork point at.sequence: expected an integer, got 6.0"),
    ({"before_node": "draft", "colour": 1}, "at.colour: expected no other key"),
    ({"version": 3}, "no snapshot at version 3"),
    ("version:3", "no snapshot at version 3"),
    ("failure", "no node failed"),
])
def test_unresolvable_points_explain_themselves(at, fragment: str) -> None:
    with pytest.raises(ForkPointNotFound) as raised:
        prepare_fork(record("review-loop"), at=at)
    assert fragment in raised.value.message


def test_a_completed_run_forked_without_a_point_is_an_error() -> None:
    with pytest.raises(ForkPointNotFound) as raised:
        fork(record("research-write"), change={"kind": "memory", "set": {"goal": "x"}})
    assert "'failure' is only the default for a failed run" in raised.value.message


def test_after_a_failed_node_is_refused() -> None:
    with pytest.raises(ForkPointNotFound) as raised:
        prepare_fork(record("flaky-tool"), at={"after_node": "fetch_inventory"})
    assert "did not complete (failed)" in raised.value.message
