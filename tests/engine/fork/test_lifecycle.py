"""After a fork (SPEC §3.1 graph_version, §3.9): rebasing, promoting a fix, saving cases."""

from __future__ import annotations

import pytest

from forklab.engine import Case, change, fork, promote, run_case, save_case
from forklab.engine.canonical import canonical_equals
from forklab.engine.errors import InvalidChange, PrefixDiverged, PromoteConflict
from forklab.engine.fork.lifecycle import run_case_against
from forklab.engine.graph import Condition
from forklab.engine.recording import run_recorded
from forklab.engine.reducers import fold
from tests.engine.fork.helpers import graph_with, labels, record

# -- graph_version --------------------------------------------------------------------------


def test_a_newer_version_that_changes_only_a_tail_node_forks_onto_it() -> None:
    base = record("research-write")
    version = base.store.save_graph(graph_with(
        base.graph, "write", prompt="Goal: {goal}\nNotes: {notes}\nKeep it short."))

    result = fork(base, at={"before_node": "write"}, graph_version=version)

    assert version == 2
    assert result.state.status == "completed"
    assert labels(result.calls) == [("write", "agent", "changed")]
    requested = next(e for e in result.event_log if e.type == "agent.requested")
    assert requested.messages[0]["content"].endswith("Keep it short.")
    assert result.state.memory["notes"] == base.state.memory["notes"]


def test_a_newer_version_that_changes_a_prefix_node_is_prefix_diverged() -> None:
    base = record("research-write")
    version = base.store.save_graph(graph_with(base.graph, "research",
                                               prompt="Dig into: {goal}"))

    with pytest.raises(PrefixDiverged) as raised:
        fork(base, at={"before_node": "write"}, graph_version=version)

    assert raised.value.code == "prefix_diverged"
    assert raised.value.context == {"node": "research", "version": version}
    assert "fork at or before it" in raised.value.message


def test_a_prefix_node_changed_in_a_newer_version_is_fine_when_forking_before_it() -> None:
    base = record("research-write")
    version = base.store.save_graph(graph_with(base.graph, "research",
                                               prompt="Dig into: {goal}"))

    result = fork(base, at="start", graph_version=version)

    assert [c["node"] for c in result.calls] == ["research", "write"]
    assert result.state.status == "completed"


# -- promote --------------------------------------------------------------------------------


def test_promote_adopts_the_forks_config_changes_as_a_new_graph_version() -> None:
    base = record("research-write")
    result = fork(base, at={"before_node": "write"},
                  change=[change.prompt("write", "Be terse."), change.memory(set={"x": 1})])

    promoted = promote(result.run_id, store=base.store)

    assert (promoted.from_version, promoted.version) == (1, 2)
    assert promoted.promoted == [{"kind": "prompt", "target": "write",
                                  "system_prompt": "Be terse."}]
    assert [s["change"]["kind"] for s in promoted.skipped] == ["memory"]
    assert "cannot be promoted" in promoted.skipped[0]["reason"]
    latest = base.store.load_graph("research-write")
    assert latest.node("write").agent.system_prompt == "Be terse."
    assert latest.resolve_agent(latest.node("research").agent).system_prompt == (
        base.graph.resolve_agent(base.graph.node("research").agent).system_prompt)
    assert base.store.graph_versions("research-write") == [1, 2]


def test_a_fork_with_only_state_changes_cannot_be_promoted_and_says_so() -> None:
    base = record("research-write")
    result = fork(base, at={"before_node": "write"}, change=change.memory(set={"notes": "x"}))

    with pytest.raises(InvalidChange) as raised:
        promote(result.run_id, store=base.store)

    assert "no config-type change" in raised.value.message
    assert "only alter state" in raised.value.message
    assert base.store.graph_versions("research-write") == [1]


def test_promoting_a_run_that_is_not_a_fork_is_refused() -> None:
    base = record("research-write")
    with pytest.raises(InvalidChange):
        promote(base.run_id, store=base.store)


def test_a_newer_version_touching_the_same_node_is_a_promote_conflict() -> None:
    base = record("research-write")
    result = fork(base, at={"before_node": "write"}, change=change.prompt("write", "Be terse."))
    base.store.save_graph(graph_with(base.graph, "write",
                                     prompt="Goal: {goal}\nNotes: {notes}\nOther."))

    with pytest.raises(PromoteConflict) as raised:
        promote(result.run_id, store=base.store)

    assert raised.value.code == "promote_conflict"
    assert raised.value.context == {"node": "write", "base_version": 1, "latest": 2}
    assert base.store.graph_versions("research-write") == [1, 2]


def test_a_newer_version_touching_another_node_does_not_conflict() -> None:
    base = record("research-write")
    result = fork(base, at={"before_node": "write"}, change=change.prompt("write", "Be terse."))
    base.store.save_graph(graph_with(base.graph, "research", prompt="Dig into: {goal}"))

    promoted = promote(result.run_id, store=base.store)

    latest = base.store.load_graph("research-write", promoted.version)
    assert promoted.version == 3
    assert latest.node("research").prompt == "Dig into: {goal}"
    assert latest.node("write").agent.system_prompt == "Be terse."


# -- cases ----------------------------------------------------------------------------------


def _terse_fork():
    base = record("research-write")
    return base, fork(base, at={"before_node": "write"}, change=change.prompt("write", "Terse."))


def test_a_saved_case_with_criteria_that_hold_passes() -> None:
    base, result = _terse_fork()

    case = save_case(result.run_id, name="terse", store=base.store, criteria=[
        Condition(key="draft", op="exists"),
        Condition(key="draft", op="eq", value=result.state.memory["draft"])])
    outcome = run_case(case)

    assert (outcome.name, outcome.passed, outcome.failures) == ("terse", True, [])
    assert case.changes == result.changes
    assert case.base_run_id == base.run_id
    assert case.final_memory == result.state.memory


def test_a_case_survives_its_json_round_trip() -> None:
    base, result = _terse_fork()
    case = save_case(result.run_id, name="terse", store=base.store,
                     criteria=[Condition(key="draft", op="truthy")])

    again = Case.model_validate_json(case.model_dump_json())

    assert run_case(again).passed


def test_a_criterion_that_does_not_hold_fails_the_case() -> None:
    base, result = _terse_fork()
    case = save_case(result.run_id, name="wrong", store=base.store,
                     criteria=[Condition(key="draft", op="eq", value="something else")])

    outcome = run_case(case)

    assert not outcome.passed
    assert outcome.failures[0].startswith("draft eq 'something else' does not hold")


def test_a_criterion_that_no_longer_holds_under_a_changed_graph_fails_the_case() -> None:
    base, result = _terse_fork()
    case = save_case(result.run_id, name="draft-exists", store=base.store,
                     criteria=[Condition(key="draft", op="exists")])
    renamed = graph_with(base.graph, "write", writes=["article"])

    outcome = run_case(case, graph=renamed)

    assert run_case(case).passed
    assert not outcome.passed
    assert "draft exists" in outcome.failures[0]


def test_a_case_without_criteria_says_it_cannot_fail_on_criteria() -> None:
    base, result = _terse_fork()

    outcome = run_case(save_case(result.run_id, name="bare", store=base.store))

    assert outcome.passed
    assert "no criteria" in outcome.note


def test_only_a_finished_fork_can_be_saved_as_a_case() -> None:
    base = record("order-fulfilment")
    paused = fork(base, at={"before_node": "approve"})

    with pytest.raises(InvalidChange):
        save_case(paused.run_id, name="paused", store=base.store)
    with pytest.raises(InvalidChange):
        save_case(base.run_id, name="primary", store=base.store)
    assert fold(base.store.read(paused.run_id)).status == "paused"


# -- promote carries exactly what the tail applied (issue 35, class 3) ------------------------


def test_a_change_to_a_node_that_ran_only_before_the_point_is_not_promoted() -> None:
    base = record("research-write")
    result = fork(base, at={"before_node": "write"},
                  change=[change.prompt("research", "Dig deeper."),
                          change.prompt("write", "Be terse.")])
    assert any("'research' does not run after the fork point" in w for w in result.warnings)

    with pytest.raises(PromoteConflict) as raised:
        promote(result.run_id, store=base.store)

    assert raised.value.context["reason"] == "not_applied"
    assert [c["target"] for c in raised.value.context["changes"]] == ["research"]
    assert "'research' ran before the point" in raised.value.message
    assert base.store.graph_versions("research-write") == [1]


def test_only_applied_promotes_what_the_tail_applied_and_the_re_run_reproduces_the_fork() -> None:
    base = record("research-write")
    result = fork(base, at={"before_node": "write"},
                  change=[change.prompt("research", "Dig deeper."),
                          change.prompt("write", "Be terse.")])

    promoted = promote(result.run_id, store=base.store, only_applied=True)

    assert [c["target"] for c in promoted.promoted] == ["write"]
    assert [s["change"]["target"] for s in promoted.skipped] == ["research"]
    graph = base.store.load_graph("research-write", promoted.version)
    rerun = run_recorded(graph, dict(result.state.input), env=base.env)
    assert canonical_equals(rerun.state.memory, result.state.memory)


# -- cases run against the graph's current version (issue 35, class 2) ------------------------


def test_a_case_runs_against_the_graph_s_current_version_and_says_which() -> None:
    base, result = _terse_fork()
    case = save_case(result.run_id, name="draft-exists", store=base.store,
                     criteria=[Condition(key="draft", op="exists")])
    assert run_case_against(case, store=base.store).passed
    base.store.save_graph(graph_with(base.graph, "write", writes=["article"]))

    current = run_case_against(case, store=base.store)
    named = run_case_against(case, store=base.store, version=1)

    assert (current.passed, current.graph_id, current.graph_version) == (
        False, "research-write", 2)
    assert "draft exists" in current.failures[0]
    assert (named.passed, named.graph_version) == (True, 1)
    assert current.wire()["graph_version"] == 2


def test_a_case_re_serves_no_recorded_node_whole_past_a_graph_edit() -> None:
    base = record("research-write")
    result = fork(base, at="start", change=change.prompt("write", "Terse."),
                  policy={"memoize": True})
    assert any(ex.memo for ex in result.state.executions)  # research was served whole
    case = save_case(result.run_id, name="notes", store=base.store,
                     criteria=[Condition(key="notes", op="exists")])
    edited = graph_with(base.graph, "research", writes=["facts"])
    edited = graph_with(edited, "write", reads=["goal", "facts"],
                        prompt="Goal: {goal}\nNotes: {facts}\nWrite the piece.")
    base.store.save_graph(edited)

    outcome = run_case_against(case, store=base.store)

    assert not outcome.passed, "research's recorded writes were re-served past the edit"
    assert "notes exists" in outcome.failures[0]


def test_a_case_whose_changes_no_longer_apply_fails_naming_the_version() -> None:
    base, result = _terse_fork()
    case = save_case(result.run_id, name="terse", store=base.store,
                     criteria=[Condition(key="draft", op="exists")])

    missing = run_case_against(case, store=base.store, version=7)

    assert not missing.passed and missing.graph_version == 7
    assert "version 7 of graph 'research-write'" in missing.failures[0]
