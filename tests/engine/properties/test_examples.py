"""One small, named example per invariant class of issue 8 (and two fidelity bugs the
generator found). Each failed on main when it was written; each names what it pins down.

The graphs are built by hand from the property suite's deterministic tools
(:mod:`tests.engine.properties.world`), so every example reads on its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import (
    change,
    fork,
    fork_points,
    parse_graph,
    prepare_fork,
    promote,
    replay,
    run_case,
    save_case,
)
from forklab.engine.actions import ChildStarted
from forklab.engine.errors import ConflictingChanges, ForklabError, ForkPointNotFound
from forklab.engine.graph import Condition, GraphSpec
from forklab.engine.recording import run_recorded
from forklab.engine.reducers import fold
from tests.engine.properties.builders import agent, chain, record, tool
from tests.engine.properties.recording import same_outcome, show
from tests.engine.properties.world import (
    REFLECT_TOOL,
    UNPRICED_MODEL,
    WRITE_TOOL,
    Harness,
    digest,
)

# -- 1 point independence --------------------------------------------------------------------


def test_an_input_patch_of_a_key_declared_but_absent_when_recorded_moves_the_point_back() -> None:
    h = Harness()
    base = record(h, chain("g", agent("summarise", ["topic"], "summary", prompt="On {topic}"),
                           agent("polish", ["summary"], "final")), {})

    result = fork(base, at={"before_node": "polish"}, change=change.input_patch({"topic": "x"}))

    assert result.effective_fork_sequence_id == 1  # before 'summarise', which declared topic
    assert result.state.memory["summary"] != base.state.memory["summary"]
    moved = [w for w in result.warnings if "summarise" in w and "topic" in w]
    assert moved and moved[0] in result.explain(), result.warnings


def test_an_input_patch_keeps_the_value_a_prefix_node_overwrote_without_reading() -> None:
    h = Harness()
    base = record(h, chain("g", tool("fetch", [], ["topic"]), agent("write", ["other"], "out")),
                  {"topic": "dogs"})

    result = fork(base, at={"before_node": "write"}, change=change.input_patch({"topic": "cats"}))

    assert result.state.memory["topic"] == base.state.memory["topic"] != "cats"
    assert result.state.input["topic"] == "cats"


def test_an_agent_router_asks_the_same_question_after_its_graph_was_stored() -> None:
    """Found by the generator: a stored graph comes back with its keys sorted, and an agent
    router's choices are sent to the model in mapping order — so a fork that re-runs the
    router (memoize off) asks another question than the recording and may route elsewhere."""
    h = Harness()
    graph = parse_graph({"id": "g", "start": "pick", "nodes": [
        {"id": "pick", "kind": "router", "agent": {"model": "scripted-small"}, "prompt": "p1",
         "choices": {"yes": "left", "no": "right"}},
        tool("left", [], ["x"]), tool("right", [], ["y"])]})
    base = record(h, graph, {})

    result = fork(base, at="start")

    assert result.state.path() == base.state.path(), show(base.state, result.state)


# -- 2 memoize is invisible -------------------------------------------------------------------


def _loop() -> GraphSpec:
    return parse_graph({"id": "g", "start": "step", "max_iterations": 4, "nodes": [
        tool("step", ["k"], ["k"]),
        {"id": "check", "kind": "router", "reads": ["k"], "default": "step",
         "rules": [{"when": [{"key": "$iteration", "op": "gte", "value": 2}], "to": "end"}]}],
        "edges": [{"from": "step", "to": "check"}]})


def test_a_router_in_a_loop_is_not_served_another_iterations_recording() -> None:
    h = Harness()
    base = record(h, _loop(), {})
    second = base.state.executions[2].writes["k"]  # what 'step' wrote on the second pass
    item = change.output("step", {"k": second})  # so 'check' sees on pass 1 what it saw on 2

    on = fork(base, at="start", change=item, policy={"memoize": True})
    off = fork(base, at="start", change=item, policy={"memoize": False})

    assert [e["node"] for e in off.state.path()] == ["step", "check", "step", "check"]
    assert on.state.path() == off.state.path(), show(off.state, on.state)


def test_a_memoized_approval_writes_the_same_taint_as_a_live_one() -> None:
    h = Harness()
    base = record(h, chain("g", tool("fetch", [], ["page"], trusted=False),
                           {"id": "gate", "kind": "approval", "reads": ["page"],
                            "writes": ["decision"]}), {})

    null = fork(base, at="start", policy={"memoize": True})

    assert null.state.taint == base.state.taint, show(base.state, null.state)


# -- 3 nodes see only what they declare -------------------------------------------------------


def test_a_router_rule_over_an_undeclared_key_is_refused_naming_node_and_key() -> None:
    with pytest.raises(ForklabError) as refused:
        parse_graph({"id": "g", "start": "route", "nodes": [
            {"id": "route", "kind": "router", "reads": ["a"], "default": "end",
             "rules": [{"when": [{"key": "secret", "op": "exists"}], "to": "end"}]}]})

    assert refused.value.code == "invalid_graph"
    assert "route" in refused.value.message and "'secret'" in refused.value.message


def test_a_subgraph_input_mapping_an_undeclared_key_is_refused_naming_node_and_key() -> None:
    with pytest.raises(ForklabError) as refused:
        parse_graph({"id": "g", "start": "sub", "nodes": [
            {"id": "sub", "kind": "subgraph", "graph": "child", "reads": ["a"],
             "input": {"x": "secret"}}]})

    assert refused.value.code == "invalid_graph"
    assert "sub" in refused.value.message and "'secret'" in refused.value.message


def test_the_guard_replays_a_write_only_for_the_same_fingerprint() -> None:
    h = Harness()
    base = record(h, chain("g", tool("send", ["to"], ["receipt"], path=WRITE_TOOL)),
                  {"to": "ada"})

    # same args, another config: not "the same inputs" — the recording is not served
    result = fork(base, at="start", change=change.config("send", {"trusted": False}))

    assert result.state.status == "blocked"
    assert [e["node"] for e in result.suppressed_effects] == ["send"]
    assert len(h.world.sent) == 1


# -- 4 a fork of a fork is a fork of its root with the changes combined -----------------------


def _three() -> GraphSpec:
    return chain("g", agent("a", [], "x"), agent("b", ["x"], "y"), agent("c", ["y"], "z"))


def test_start_on_a_fork_re_runs_the_whole_graph_with_both_changes() -> None:
    h = Harness()
    base = record(h, _three(), {})
    first = fork(base, at={"before_node": "c"}, change=change.prompt("c", "Terse."))

    second = fork(first.run_id, store=base.store, env=h.env, at="start",
                  change=change.prompt("a", "Loud."))
    combined = fork(base, at="start", change=[change.prompt("c", "Terse."),
                                              change.prompt("a", "Loud.")])

    assert same_outcome(second.state, combined.state), show(combined.state, second.state)
    assert [c["kind"] for c in second.state.changes] == ["prompt", "prompt"]
    assert second.state.parent_run_id == first.run_id


def test_a_fork_of_a_fork_that_substituted_a_panels_output_is_not_refused_as_unpriced() -> None:
    """Found by the nightly profile."""
    h = Harness()
    base = record(h, chain("g", {"id": "vote", "kind": "agent", "writes": ["v"], "roles": {
        "voters": {"agent": {"model": "scripted-mini"}, "count": 2, "writes": "v"}}},
        agent("say", ["v"], "x")), {})
    first = fork(base, at="start", change=change.output("vote", {}))
    own = first.state.executions[first.state.prefix_executions:]

    second = fork(first.run_id, store=base.store, env=h.env,
                  at={"sequence": own[0].start_seq - 1},
                  change=change.config("say", {"prompt": "Redo"}))

    assert second.state.status == "completed"


def test_the_points_of_a_fork_include_its_inherited_boundaries_with_their_run() -> None:
    h = Harness()
    base = record(h, _three(), {})
    first = fork(base, at={"before_node": "c"}, change=change.prompt("c", "Terse."))

    points = [p.to_wire() for p in fork_points(first.event_log)]

    assert [(p["node"], p["run_id"]) for p in points if p["node"]] == [
        ("a", base.run_id), ("b", base.run_id), ("c", first.run_id)]


def test_promoting_a_fork_of_a_fork_carries_both_changes_and_reproduces_it() -> None:
    h = Harness()
    base = record(h, _three(), {})
    first = fork(base, at={"before_node": "c"}, change=change.prompt("c", "Terse."))
    second = fork(first.run_id, store=base.store, env=h.env, at={"before_node": "b"},
                  change=change.prompt("b", "Loud."))

    promoted = promote(second.run_id, store=base.store)

    assert [c["target"] for c in promoted.promoted] == ["c", "b"]
    graph = base.store.load_graph("g", promoted.version)
    assert run_recorded(graph, {}, store=base.store, env=h.env).memory == second.state.memory


# -- 5 subgraphs are not a hole --------------------------------------------------------------


def _child() -> GraphSpec:
    return chain("child", agent("c1", ["q"], "r1"), agent("c2", ["r1"], "r2"),
                 tool("c3", ["r2"], ["r3"], path=REFLECT_TOOL))


def _parent() -> GraphSpec:
    return chain("parent", tool("fetch", [], ["page"], trusted=False),
                 {"id": "sub", "kind": "subgraph", "graph": "child", "reads": ["page"],
                  "input": {"q": "page"}, "output": {"answer": "r3"}, "writes": ["answer"]})


def test_a_subgraphs_calls_spend_from_the_forks_live_call_budget() -> None:
    h = Harness()
    graph = parse_graph({"id": "parent", "start": "pick", "nodes": [
        {"id": "pick", "kind": "router", "default": "end",
         "rules": [{"when": [{"key": "$iteration", "op": "eq", "value": 99}], "to": "sub"}]},
        {"id": "sub", "kind": "subgraph", "graph": "child", "input": {}, "output": {}}],
        "edges": []})
    base = record(h, graph, {}, _child())
    h.counter.reset()

    # a branch the base never took: the estimate cannot see the child's three calls
    result = fork(base, at="start", change=change.route("pick", "sub"),
                  budget={"max_live_calls": 1}, policy={"side_effects": {"allow": True}})

    assert h.counter.total <= 1, f"{h.counter.total} real calls under max_live_calls=1"
    assert result.state.error and result.state.error["code"] == "live_budget_exceeded"


def test_the_estimate_counts_the_calls_a_subgraph_will_make() -> None:
    h = Harness()
    base = record(h, _parent(), {}, _child())

    plan = prepare_fork(base, at={"before_node": "sub"}, ignore_budget=True,
                        policy={"side_effects": {"allow": True}})

    assert plan.estimate.live_calls == 3  # c1, c2, c3 of the child


def test_taint_crosses_into_the_child_and_back_out() -> None:
    h = Harness()
    base = record(h, _parent(), {}, _child())
    started = base.state.executions[1].actions[0]
    assert isinstance(started, ChildStarted)
    child = fold(base.store.read(started.child_run_id))

    assert {"q", "r1", "r2", "r3"} <= child.taint  # derived from the untrusted page
    assert "answer" in base.state.taint


def test_reflection_writes_of_a_subgraph_in_a_fork_are_discarded() -> None:
    h = Harness()
    base = record(h, _parent(), {}, _child())
    writes = h.reflections.writes

    fork(base, at={"before_node": "sub"}, policy={"side_effects": {"allow": True}})

    assert h.reflections.writes == writes


def test_strict_replay_of_an_unchanged_run_with_a_subgraph_succeeds() -> None:
    h = Harness()
    base = record(h, _parent(), {}, _child())

    state = replay(base.run_id, store=base.store, strict=True, env=h.env)

    assert state.memory == base.state.memory


def test_a_case_saved_from_a_fork_with_a_subgraph_passes() -> None:
    h = Harness()
    base = record(h, _parent(), {}, _child())
    result = fork(base, at={"before_node": "sub"}, policy={"side_effects": {"allow": True}},
                  change=change.memory(set={"page": "trusted now"}))
    case = save_case(result.run_id, name="sub", store=base.store,
                     criteria=[Condition(key="answer", op="eq",
                                         value=result.state.memory["answer"])])

    assert run_case(case).passed


def test_a_case_saved_from_a_fork_that_substituted_a_subgraphs_output_passes() -> None:
    """Found by the nightly profile: the case's re-drive maps the substituted output through
    the node's ``output`` mapping instead of replaying the substitution."""
    h = Harness()
    parent = parse_graph({"id": "parent", "start": "sub", "nodes": [
        {"id": "sub", "kind": "subgraph", "graph": "child", "output": {"answer": "r1"},
         "writes": ["answer"]}]})
    base = record(h, parent, {}, _child())
    result = fork(base, at="start", change=change.output("sub", {"answer": "forced"}))
    case = save_case(result.run_id, name="forced", store=base.store,
                     criteria=[Condition(key="answer", op="eq", value="forced")])

    assert result.state.memory["answer"] == "forced"
    assert run_case(case).passed, run_case(case).failures


def test_a_case_saved_from_a_fork_that_substituted_a_tools_output_passes() -> None:
    """Same cause, any node kind: an output change writing nothing leaves memory alone in the
    fork; the case's re-drive writes the substituted result through the tool's ``writes``."""
    h = Harness()
    base = record(h, chain("g", tool("fetch", [], ["page"])), {"page": "kept"})
    result = fork(base, at="start", change=change.output("fetch", {}))
    case = save_case(result.run_id, name="kept", store=base.store,
                     criteria=[Condition(key="page", op="eq", value="kept")])

    assert result.state.memory["page"] == "kept"
    assert run_case(case).passed, run_case(case).failures


def test_a_new_child_graph_version_is_not_served_the_old_childs_recording() -> None:
    h = Harness()
    base = record(h, _parent(), {}, _child())
    wire = _child().to_wire()
    wire["nodes"][0]["agent"]["system_prompt"] = "A new child."
    base.store.save_graph(parse_graph(wire))

    result = fork(base, at="start", policy={"memoize": True})

    assert result.state.status == "blocked" or result.state.memory != base.state.memory


# -- 6 conflicts are refused, not ordered -----------------------------------------------------


def _panel() -> GraphSpec:
    return parse_graph({"id": "g", "start": "vote", "nodes": [
        {"id": "vote", "kind": "agent", "reads": ["q"], "writes": ["votes", "verdict"],
         "roles": {"voters": {"agent": {"model": "scripted-mini"}, "count": 3, "writes": "votes"},
                   "judge": {"agent": {"model": "scripted-large"}, "writes": "verdict"}}}]})


@pytest.mark.parametrize(("a", "b"), [
    (change.model("vote.voters", "scripted-small"), change.model("vote.voters[1]", "gpt-4o")),
    (change.memory(set={"q": "why"}), change.input_patch({"q": "how"})),
    (change.output("vote", {"verdict": "ship"}), change.temperature("vote.judge", 0.5)),
], ids=["role-wide-and-instance", "memory-and-input-patch", "output-and-agent-change"])
def test_two_changes_writing_the_same_thing_are_refused_naming_both(a: Any, b: Any) -> None:
    h = Harness()
    base = record(h, _panel(), {"q": "ship it?"})

    for attempt in (lambda: prepare_fork(base, at="start", change=[a, b]),
                    lambda: fork(base, at="start", change=[b, a])):
        with pytest.raises(ConflictingChanges) as refused:
            attempt()
        message = refused.value.message.replace("_", " ")
        assert a.kind.replace("_", " ") in message and b.kind.replace("_", " ") in message


# -- 7 every call is accounted ----------------------------------------------------------------


def test_a_tool_call_that_raised_is_listed_and_counted() -> None:
    h = Harness()
    region = next(f"r{i}" for i in range(99) if digest({"region": f"r{i}"}, "flaky") % 3 == 0)
    base = record(h, chain("g", tool("flaky", ["region"], ["stock"], path="props.flaky")),
                  {"region": region})
    assert base.state.status == "failed"

    result = fork(base, at="failure")

    assert [(c["node"], c["kind"], c["label"]) for c in result.calls] == [
        ("flaky", "tool", "live")]


def test_a_multi_agent_node_labels_each_call_by_its_own_cause() -> None:
    h = Harness()
    base = record(h, _panel(), {"q": "ship it?"})

    result = fork(base, at="start", change=change.model("vote.voters[1]", "scripted-large"))

    assert [(c["role"], c["label"]) for c in result.calls] == [
        ("voters[0]", "live"), ("voters[1]", "changed"), ("voters[2]", "live"),
        ("judge", "changed")]


def test_the_estimate_counts_an_allowed_write() -> None:
    h = Harness()
    base = record(h, chain("g", agent("draft", [], "text"),
                           tool("send", ["text"], ["receipt"], path=WRITE_TOOL)), {})

    plan = prepare_fork(base, at="start", policy={"side_effects": {"allow": ["send"]}})

    assert plan.estimate.live_calls == 2


def test_a_call_whose_worst_case_would_pass_the_cost_cap_is_not_made() -> None:
    h = Harness()
    big = {"model": "scripted-large", "max_tokens": 4000}
    base = record(h, chain("g", agent("a", [], "x", agent=big)), {})
    spent = base.state.cost_usd
    worst = 4000 * 15.00 / 1_000_000
    h.counter.reset()

    result = fork(base, at="start", budget={"max_cost_usd": (spent + worst) / 2})

    assert h.counter.total == 0
    assert result.state.error and result.state.error["code"] == "live_budget_exceeded"


def test_an_unpriced_call_is_reported_as_unpriced_not_as_zero() -> None:
    h = Harness()
    base = record(h, chain("g", agent("a", [], "x")), {})

    result = fork(base, at="start", change=change.model("a", UNPRICED_MODEL),
                  budget={"max_cost_usd": None})

    assert [c["cost_usd"] for c in result.calls] == [None]
    assert result.incurred_cost_usd != 0.0
    assert "unpriced" in result.explain()


# -- 8 errors name the real cause -------------------------------------------------------------


def test_a_node_behind_the_compaction_boundary_names_the_earliest_forkable_point() -> None:
    h = Harness()
    base = record(h, _three(), {})
    boundary = fork_points(base.event_log)[2].seq  # before 'c'
    base.store.save_snapshot(base.run_id, fold(base.store.read(base.run_id, upto=boundary)))
    base.store.compact(base.run_id, boundary)

    with pytest.raises(ForkPointNotFound) as refused:
        fork(base.run_id, store=base.store, env=h.env, at={"before_node": "a"})

    assert refused.value.context["earliest_forkable"] == boundary
    assert f"seq {boundary}" in refused.value.message


def test_an_archived_run_with_a_final_snapshot_is_source_missing() -> None:
    h = Harness()
    base = record(h, _three(), {})
    base.store.save_snapshot(base.run_id, base.state)
    base.store.archive(base.run_id)

    with pytest.raises(ForklabError) as refused:
        fork(base.run_id, store=base.store, env=h.env, at={"before_node": "b"})

    assert refused.value.code == "source_missing"


def test_a_case_with_no_criteria_from_a_blocked_fork_passes_and_says_it_cannot_fail() -> None:
    h = Harness()
    base = record(h, chain("g", agent("draft", [], "text"),
                           tool("send", ["text"], ["receipt"], path=WRITE_TOOL)), {})
    blocked = fork(base, at="start", change=change.prompt("draft", "Other."))
    assert blocked.state.status == "blocked"

    outcome = run_case(save_case(blocked.run_id, name="blocked", store=base.store))

    assert outcome.passed and "cannot fail" in outcome.note
