"""Changes (SPEC §3.3): serializable builders, scoping, role addressing and refusal rules."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forklab.engine import change, fork, parse_changes, prepare_fork
from forklab.engine.errors import ConflictingChanges, InvalidChange, InvalidOverrides
from forklab.engine.fork.changes import parse_change
from tests.engine.fork.helpers import of_type, record

BUILT = [
    change.model("write", "scripted-small"),
    change.model("write", "llama3.1:8b", provider="openai"),
    change.prompt("write", "Be terse."),
    change.temperature("write", 1.25),
    change.memory(set={"notes": ["a", {"b": 1}]}, delete=["goal"]),
    change.config("write", {"prompt": "Goal: {goal}", "reads": ["goal"]}),
    change.route("gate", "end", once=True),
    change.output("research", {"notes": "substituted"}),
    change.tool("fetch_inventory", {"region": "eu-west", "in_stock": 1}),
    change.human_response("edited", data={"why": "gift"}, memory_updates={"note": "wrap"}),
    change.input_patch({"coupon": None, "order": {"qty": 3}}),
]


@pytest.mark.parametrize("built", BUILT, ids=[c.kind for c in BUILT])
def test_each_builder_round_trips_through_its_json_wire_form(built) -> None:
    wire = built.wire()

    text = json.dumps(wire)
    (back,) = parse_changes(json.loads(text))

    assert wire["kind"] == built.kind
    assert back == built
    assert back.wire() == wire


def test_the_route_change_wire_form_uses_from_and_to() -> None:
    assert change.route("route", "escalate").wire() == {
        "kind": "route", "from": "route", "to": "escalate", "once": False}


def test_a_fork_stores_its_changes_in_wire_form_and_reproduces_from_them() -> None:
    base = record("research-write")
    changes = [change.prompt("write", "Be terse."), change.memory(set={"extra": 1})]

    first = fork(base, at={"before_node": "write"}, change=changes)
    again = fork(base, at={"before_node": "write"}, change=first.state.changes)

    assert first.changes == first.state.changes == [c.wire() for c in changes]
    assert again.state.memory == first.state.memory


# -- refusals -----------------------------------------------------------------------------


def _refused(name: str, changes, exc=InvalidChange, at="start") -> str:
    with pytest.raises(exc) as raised:
        prepare_fork(record(name), at=at, change=changes)
    return raised.value.message


@pytest.mark.parametrize("built", [change.prompt("charge", "x"), change.model("charge", "m"),
                                   change.temperature("approve", 0.1)])
def test_an_agent_change_on_a_node_without_an_agent_says_it_takes_memory_or_output(built) -> None:
    message = _refused("order-fulfilment", built)
    assert "drives no agent" in message
    assert "memory or output" in message


def test_an_agent_change_on_an_unknown_node_lists_the_nodes() -> None:
    message = _refused("research-write", change.prompt("editor", "x"))
    assert "no node 'editor'" in message and "research, write" in message


def test_a_multi_role_node_needs_a_role() -> None:
    message = _refused("panel-vote", change.model("vote", "scripted-large"))
    assert "drives several roles" in message
    assert "vote.voters" in message and "vote.judge" in message


@pytest.mark.parametrize(("target", "fragment"), [
    ("vote.voters[3]", "index 3 is out of range (0..2)"),
    ("vote.judge[1]", "index 1 is out of range (0..0)"),
    ("vote.critic", "no role 'critic'"),
    ("vote.voters[x]", "cannot read target"),
])
def test_a_bad_role_address_is_refused(target: str, fragment: str) -> None:
    assert fragment in _refused("panel-vote", change.model(target, "scripted-large"))


def _requested(result) -> list[tuple[str | None, int | None, str]]:
    return [(e.role, e.index, e.model) for e in of_type(result.event_log, "agent.requested")
            if e.node == "vote"]


def test_addressing_one_voter_changes_only_that_voters_model() -> None:
    base = record("panel-vote")

    result = fork(base, at="start", change=change.model("vote.voters[2]", "scripted-large"))

    assert _requested(result) == [
        ("voters", 0, "scripted-mini"), ("voters", 1, "scripted-mini"),
        ("voters", 2, "scripted-large"), ("judge", None, "scripted-large")]
    voters = [c for c in result.calls if c["node"] == "vote"]
    assert [c["role"] for c in voters] == ["voters[0]", "voters[1]", "voters[2]", "judge"]


def test_addressing_the_judge_changes_only_the_judge() -> None:
    base = record("panel-vote")

    result = fork(base, at="start", change=change.model("vote.judge", "scripted-small"))

    assert _requested(result) == [
        ("voters", 0, "scripted-mini"), ("voters", 1, "scripted-mini"),
        ("voters", 2, "scripted-mini"), ("judge", None, "scripted-small")]


def test_addressing_a_whole_role_changes_every_instance() -> None:
    base = record("panel-vote")

    result = fork(base, at="start", change=change.temperature("vote.voters", 0.0))

    temps = [(e.role, e.temperature) for e in of_type(result.event_log, "agent.requested")
             if e.node == "vote"]
    assert temps == [("voters", 0.0)] * 3 + [("judge", 0.0)]
    assert base.graph.node("vote").roles["judge"].agent == "judge"


def test_an_agent_change_is_scoped_to_the_node_that_names_it() -> None:
    # review-loop's draft and revise share the 'author' agent
    base = record("review-loop")

    result = fork(base, at="start", change=change.model("draft", "scripted-large"),
                  ignore_budget=True)

    models = {e.node: e.model for e in of_type(result.event_log, "agent.requested")}
    assert models["draft"] == "scripted-large"
    assert models.get("revise", "scripted-small") == "scripted-small"
    assert result.prefix_state.memory == base.state.input


def test_two_prompt_changes_on_one_target_conflict() -> None:
    message = _refused("research-write",
                       [change.prompt("write", "a"), change.prompt("write", "b")],
                       ConflictingChanges)
    assert "prompt" in message and "write" in message


def test_two_changes_of_different_kinds_on_one_target_do_not_conflict() -> None:
    plan = prepare_fork(record("research-write"), at="start",
                        change=[change.prompt("write", "a"), change.model("write", "scripted-small")])
    agent = plan.graph.node("write").agent
    assert (agent.system_prompt, agent.model) == ("a", "scripted-small")


@pytest.mark.parametrize("changes", [
    change.memory(set={"notes": 1}, delete=["notes"]),
    [change.memory(set={"notes": 1}), change.memory(delete=["notes"])],
    [change.route("gate", "end"), change.route("gate", "revise")],
    [change.output("draft", {"draft": "a"}), change.output("draft", {"draft": "b"})],
    [change.config("draft", {"prompt": "a"}), change.config("draft", {"prompt": "b"})],
    [change.input_patch({"topic": "a"}), change.input_patch({"topic": "b"})],
])
def test_changes_writing_the_same_thing_conflict(changes) -> None:
    with pytest.raises(ConflictingChanges) as raised:
        prepare_fork(record("review-loop"), at="start", change=changes)
    assert raised.value.code == "conflicting_changes"


@pytest.mark.parametrize("placeholder", ["[REDACTED]", "[REDACTED]#1", "[REDACTED]#42",
                                         "[redacted: mask failed]", "  [REDACTED]  "])
def test_a_change_holding_a_redaction_placeholder_is_refused(placeholder: str) -> None:
    for spec in (change.memory(set={"notes": placeholder}),
                 change.prompt("write", placeholder),
                 change.memory(set={"notes": {"deep": [placeholder]}})):
        message = _refused("research-write", spec, InvalidOverrides)
        assert "redaction placeholder" in message


def test_text_that_merely_mentions_redaction_is_accepted() -> None:
    plan = prepare_fork(record("research-write"), at="start",
                        change=change.memory(set={"notes": "the [REDACTED] part was fine"}))
    assert plan.changes[0].set == {"notes": "the [REDACTED] part was fine"}


def _nested(depth: int):
    value: object = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.parametrize(("spec", "limit"), [
    (change.memory(set={"notes": "x" * (64 * 1024)}), "bytes"),
    (change.memory(set={"notes": _nested(16)}), "depth"),
    (change.memory(set={f"k{i}": i for i in range(200)}), "keys"),
])
def test_a_change_over_the_size_nesting_or_key_limits_is_invalid_overrides(spec, limit) -> None:
    with pytest.raises(InvalidOverrides) as raised:
        prepare_fork(record("research-write"), at="start", change=spec)
    assert raised.value.code == "invalid_overrides"
    assert raised.value.context["limit"] == limit


def test_a_change_just_under_the_limits_is_accepted() -> None:
    spec = [change.memory(set={f"k{i}": i for i in range(180)}),
            change.output("research", {"notes": _nested(12)})]
    assert len(prepare_fork(record("research-write"), at="start", change=spec).changes) == 2


@pytest.mark.parametrize(("data", "fragment"), [
    ({"kind": "rename", "target": "write"}, "unknown change kind 'rename'"),
    ({"target": "write"}, "an object with a 'kind'"),
    ("prompt", "an object with a 'kind'"),
    ({"kind": "prompt", "target": "write"}, "field 'system_prompt'"),
    ({"kind": "temperature", "target": "write", "temperature": 3}, "field 'temperature'"),
    ({"kind": "human_response", "decision": "maybe"}, "field 'decision'"),
    ({"kind": "prompt", "target": "write", "system_prompt": "x", "extra": 1}, "field 'extra'"),
])
def test_a_malformed_change_is_invalid_change(data, fragment: str) -> None:
    with pytest.raises(InvalidChange) as raised:
        parse_change(data)
    assert raised.value.code == "invalid_change"
    assert fragment in raised.value.message


@pytest.mark.parametrize("build", [lambda: change.temperature("write", 2.5),
                                   lambda: change.human_response("maybe")])
def test_a_builder_given_a_bad_value_raises_invalid_change_not_a_pydantic_error(build) -> None:
    with pytest.raises(InvalidChange):
        build()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_temperature_that_is_not_a_finite_number_says_so(value: float) -> None:
    with pytest.raises(InvalidChange) as raised:
        change.temperature("write", value)
    assert raised.value.context["reason"] == "Input should be a finite number"
    assert "less than or equal" not in raised.value.message  # NaN is not 'above 2'


def test_a_change_can_be_a_function_of_the_resolved_point() -> None:
    base = record("research-write")
    seen = []

    def pick(point):
        seen.append(point)
        return change.model(point.node, "scripted-large" if point.node == "research"
                            else "scripted-small")

    result = fork(base, at={"before_node": "write"}, change=pick)

    assert [(p.seq, p.node) for p in seen] == [(6, "write")]
    assert result.changes == [{"kind": "model", "target": "write", "model": "scripted-small",
                               "provider": None}]
    assert [c["model"] for c in result.calls] == ["scripted-small"]


def test_a_config_change_is_revalidated_against_the_node_and_the_graph() -> None:
    base = record("research-write")

    with pytest.raises(InvalidChange) as bad_prompt:
        prepare_fork(base, at="start", change=change.config("write", {"prompt": "{missing}"}))
    with pytest.raises(InvalidChange) as bad_writes:
        prepare_fork(base, at="start", change=change.config("write", {"writes": ["a", "b"]}))
    with pytest.raises(InvalidChange) as bad_kind:
        prepare_fork(base, at="start", change=change.config("write", {"kind": "tool"}))
    with pytest.raises(InvalidChange) as bad_type:
        prepare_fork(base, at="start", change=change.config("write", {"reads": "goal"}))

    assert "makes the graph invalid" in bad_prompt.value.message
    assert "placeholder {missing}" in bad_prompt.value.message
    assert "writes exactly one key" in bad_writes.value.message
    assert "'kind' cannot change" in bad_kind.value.message
    assert "makes the graph invalid" in bad_type.value.message


def test_a_valid_config_change_reaches_the_tail() -> None:
    base = record("research-write")

    result = fork(base, at={"before_node": "write"},
                  change=change.config("write", {"prompt": "Goal: {goal}. Short."}))

    requested = of_type(result.event_log, "agent.requested")
    assert requested[0].messages[0]["content"] == "Goal: Explain how vaccines work. Short."
    assert result.calls[0]["label"] == "changed"  # the targeted node: never "live"


@pytest.mark.parametrize(("spec", "fragment"), [
    (change.output("route", {"x": 1}), "force its decision with a route change"),
    (change.output("classify", {"reply": "hi"}), "it writes ['category'], not ['reply']"),
    (change.tool("classify", {}), "not a tool"),
    (change.route("classify", "reply"), "not a router"),
    (change.route("route", "nowhere"), "unknown target 'nowhere'"),
    (change.human_response("approved"), "has no approval gate"),
])
def test_state_changes_that_cannot_apply_to_the_graph_are_refused(spec, fragment: str) -> None:
    assert fragment in _refused("triage-router", spec)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=6).filter(lambda k: "[" not in k),
                       st.recursive(st.none() | st.booleans() | st.integers() | st.floats(
                           allow_nan=False, allow_infinity=False) | st.text(
                           alphabet="abcxyz #:", max_size=10),
                           lambda c: st.lists(c, max_size=3)
                           | st.dictionaries(st.text(alphabet="abc", max_size=3), c, max_size=3),
                           max_leaves=8), max_size=5),
       st.lists(st.text(min_size=1, max_size=6), max_size=3))
def test_any_memory_change_round_trips_through_json(set_: dict, delete: list) -> None:
    delete = [k for k in delete if k not in set_]
    built = change.memory(set=set_, delete=delete)

    (back,) = parse_changes(json.loads(json.dumps(built.wire())))

    assert back.wire() == built.wire()


def test_a_route_change_forced_every_time_into_an_unbounded_loop_is_refused() -> None:
    base = record("triage-router")

    message = _refused("triage-router", change.route("route", "classify"))
    once = prepare_fork(base, at="start", change=change.route("route", "classify", once=True))

    assert "closes a loop" in message and "once=True" in message
    assert once.changes[0].once
