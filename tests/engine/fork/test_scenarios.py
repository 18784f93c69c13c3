"""What the issue promises, scenario by scenario: the tail runs only what the change reaches,
side effects are served, blocked or allowed as the policy says, and failures can be repaired.
"""

from __future__ import annotations

from forklab.engine import HumanAnswer, change, fork
from forklab.engine.errors import ForkPointNotFound
from tests.engine.fork.helpers import Counter, labels, record, world

# -- research-write ----------------------------------------------------------------------------


def test_a_prompt_change_before_write_makes_one_live_call_and_never_reruns_research() -> None:
    counter = Counter()
    base = record("research-write", counter=counter)
    counter.reset()

    result = fork(base, at={"before_node": "write"}, change=change.prompt("write", "Be terse."))

    assert [(r.system_prompt, r.model) for r in counter.model_calls] == [
        ("Be terse.", "scripted-large")]
    assert labels(result.calls) == [("write", "agent", "changed")]
    assert [e.node for e in result.event_log if e.type == "node.started"] == ["write"]
    assert result.state.status == "completed"
    assert result.state.memory["notes"] == base.state.memory["notes"]
    assert result.state.memory["draft"] != base.state.memory["draft"]
    diff = result.diff
    assert [(s["op"], s["base"]["node"], s["variant"]["node"]) for s in diff.path["aligned"]] == [
        ("same", "research", "research"), ("changed", "write", "write")]
    assert diff.divergence == {"index": 1, "base": "write", "variant": "write"}
    assert diff.memory["draft"]["op"] == "changed"
    assert list(diff.memory) == ["draft"]
    text = result.explain()
    assert text.splitlines()[0] == (f"fork {result.run_id} of {base.run_id} at seq 6 "
                                    "(before 'write' execution 1, iteration 1)")
    assert "  path      research → write@fork" in text
    assert "  change    prompt of 'write'" in text
    assert "  status    completed" in text
    assert "~draft" in text


def test_the_tail_pays_only_for_write_and_inherits_the_research_cost() -> None:
    base = record("research-write")

    result = fork(base, at={"before_node": "write"}, change=change.prompt("write", "Be terse."))

    research = base.state.executions[0]
    write_call = result.calls[0]
    assert result.incurred_cost_usd == write_call["cost_usd"] > 0
    assert result.diff.cost["incurred_usd"] == result.incurred_cost_usd
    assert round(result.state.cost_usd, 8) == round(research.cost_usd + write_call["cost_usd"], 8)
    assert result.diff.cost["per_node"]["research"]["delta_usd"] == 0.0


# -- diamond -----------------------------------------------------------------------------------


def test_changing_one_diamond_branch_reexecutes_it_and_the_join_and_memos_the_other() -> None:
    counter = Counter()
    base = record("diamond", counter=counter)
    counter.reset()

    result = fork(base, at="start", change=change.prompt("left", "Do your part badly."),
                  policy={"memoize": True})

    assert sorted(r.system_prompt for r in counter.model_calls) == [
        "Combine both parts into one answer.", "Do your part badly."]
    assert result.memo_hits == [{"node": "plan", "occurrence": 1},
                                {"node": "right", "occurrence": 1}]
    assert labels(result.calls) == [("plan", "agent", "reused"), ("left", "agent", "changed"),
                                    ("right", "agent", "reused"), ("join", "agent", "changed")]
    assert result.state.memory["right"] == base.state.memory["right"]
    assert result.state.memory["left"] != base.state.memory["left"]
    assert set(result.diff.memory) == {"left", "answer"}
    assert "plan → left@fork → right → join@fork" in result.explain()


def test_without_memoize_the_unchanged_branch_runs_again_for_real() -> None:
    counter = Counter()
    base = record("diamond", counter=counter)
    counter.reset()

    result = fork(base, at={"before_node": "left"}, change=change.prompt("left", "Badly."))

    assert len(counter.model_calls) == 3
    assert labels(result.calls)[1] == ("right", "agent", "live")
    assert result.memo_hits == []


# -- order-fulfilment --------------------------------------------------------------------------


def test_a_human_response_fork_serves_charge_and_email_their_recordings() -> None:
    base = record("order-fulfilment")
    before = world()

    approved = fork(base, at="start", change=change.human_response("approved"))
    rejected = fork(base, at={"before_human_input": True}, change=change.human_response("rejected"))

    assert world() == before
    assert approved.state.status == "completed"
    assert labels(approved.calls) == [
        ("lookup_price", "tool", "live"), ("charge", "tool", "reused"),
        ("approve", "human", "simulated"), ("send_email", "tool", "reused")]
    assert approved.state.memory["receipt"] == base.state.memory["receipt"]
    assert rejected.state.status == "completed"
    assert labels(rejected.calls) == [("approve", "human", "simulated")]
    assert rejected.state.memory["approval"] == "rejected"
    assert "email_status" not in rejected.state.memory
    assert rejected.diff.path["skipped"] == ["send_email"]


def test_an_input_patch_that_changes_the_price_blocks_charge() -> None:
    base = record("order-fulfilment")
    before = world()

    result = fork(base, at="start", change=change.input_patch({"coupon": None}))

    assert world() == before
    assert result.state.status == "blocked"
    assert labels(result.calls) == [("lookup_price", "tool", "changed")]
    (effect,) = result.suppressed_effects
    assert effect["node"] == "charge"
    assert effect["inputs"] == {"price": result.state.memory["price"]}
    assert effect["inputs"]["price"]["discount"] == 0.0
    assert "never executed 'charge' with these inputs" in effect["reason"]
    assert '"allow": ["charge"]' in effect["reason"]
    assert result.diff.suppressed_effects == result.suppressed_effects
    assert "  blocked   charge: " in result.explain()
    assert "receipt" not in result.state.memory  # the blocked node wrote nothing
    assert result.diff.memory["receipt"]["op"] == "removed"


def test_policy_block_stops_even_a_write_with_identical_inputs() -> None:
    base = record("order-fulfilment")

    result = fork(base, at="start", change=change.human_response("approved"),
                  policy={"side_effects": "block"})

    assert result.state.status == "blocked"
    assert [e["node"] for e in result.suppressed_effects] == ["charge"]
    assert "blocked by policy" in result.suppressed_effects[0]["reason"]


def test_an_allowed_write_with_changed_inputs_runs_for_real() -> None:
    base = record("order-fulfilment")
    before = world()

    result = fork(base, at="start", change=change.input_patch({"coupon": None}),
                  policy={"side_effects": {"allow": ["charge"]}},
                  hitl=lambda request: HumanAnswer(decision="rejected"))

    assert world() == {**before, "charge": before["charge"] + 1}
    charge = next(c for c in result.calls if c["node"] == "charge")
    assert charge["label"] in ("live", "changed")
    assert result.state.memory["receipt"]["amount"] == 54.98
    assert result.suppressed_effects == []
    assert result.state.status == "completed"


def test_allow_true_lets_every_write_run_and_a_write_never_recorded_is_labelled_live() -> None:
    base = record("order-fulfilment")
    before = world()

    result = fork(base, at={"before_node": "send_email"},
                  change=change.input_patch({"email": "bob@example.com"}),
                  policy={"side_effects": {"allow": True}})

    assert world() == {**before, "email": before["email"] + 1}
    assert labels(result.calls) == [("send_email", "tool", "changed")]
    assert result.state.memory["email_status"]["sent_to"] == "bob@example.com"


def test_a_default_fork_never_resends_the_email() -> None:
    base = record("order-fulfilment")
    before = world()

    result = fork(base, at={"before_node": "send_email"},
                  change=change.input_patch({"email": "bob@example.com"}))

    assert world() == before
    assert result.state.status == "blocked"
    assert result.suppressed_effects[0]["node"] == "send_email"
    assert result.suppressed_effects[0]["inputs"]["email"] == "bob@example.com"
    assert result.effective_fork_sequence_id == result.fork_sequence_id == 16


def test_a_patch_of_an_input_read_before_the_point_moves_the_fork_to_the_start() -> None:
    counter = Counter()
    base = record("order-fulfilment", counter=counter)
    counter.reset()
    before = world()

    # lookup_price read 'order' before the gate; the note does not change the price
    result = fork(base, at={"before_node": "approve"},
                  change=change.input_patch({"order": {"note": "gift"}}))

    assert result.fork_sequence_id == 11
    assert result.effective_fork_sequence_id == 1
    assert any("the fork point moved from seq 11" in w and "to seq 1" in w
               and "'lookup_price' (execution 1) read 'order'" in w for w in result.warnings)
    assert result.state.input["order"] == {"sku": "WIDGET-1", "qty": 2, "note": "gift"}
    assert counter.tool_calls == ["forklab.engine.scenarios.tools.lookup_price"]
    assert world() == before
    assert labels(result.calls) == [
        ("lookup_price", "tool", "changed"), ("charge", "tool", "reused"),
        ("approve", "human", "reused"), ("send_email", "tool", "reused")]
    assert result.state.status == "completed"
    assert result.state.memory["receipt"] == base.state.memory["receipt"]


def test_a_patch_of_an_input_only_the_tail_reads_keeps_the_fork_point() -> None:
    base = record("order-fulfilment")

    result = fork(base, at={"before_node": "send_email"}, dry_run=True,
                  change=change.input_patch({"email": "eve@example.com"}))

    assert result.effective_fork_sequence_id == result.fork_sequence_id == 16
    assert not any("the fork point moved" in w for w in result.warnings)


# -- triage-router -----------------------------------------------------------------------------


def test_forcing_the_branch_the_base_never_took_stops_at_its_write_tool() -> None:
    base = record("triage-router")
    assert base.state.memory["category"] != "urgent"
    assert [e.node for e in base.state.executions] == ["classify", "route", "reply"]
    before = world()

    result = fork(base, at={"before_node": "route"}, change=change.route("route", "escalate"))

    assert world() == before
    assert result.state.status == "blocked"
    assert [e["node"] for e in result.suppressed_effects] == ["escalate"]
    assert result.suppressed_effects[0]["inputs"]["category"] == base.state.memory["category"]
    route = next(e for e in result.event_log if e.type == "route.decided")
    assert (route.to, route.label) == ("escalate", "simulated")
    assert result.diff.path["skipped"] == ["reply"]
    assert result.diff.path["inserted"] == ["escalate"]
    assert result.diff.memory["reply"]["op"] == "removed"
    assert result.diff.terminal["variant"] == "blocked"


def test_forcing_the_branch_with_allow_pages_oncall_for_real() -> None:
    base = record("triage-router")
    before = world()

    result = fork(base, at={"before_node": "route"}, change=change.route("route", "escalate"),
                  policy={"side_effects": {"allow": ["escalate"]}})

    assert world() == {**before, "page": before["page"] + 1}
    assert result.state.status == "completed"
    assert labels(result.calls) == [("escalate", "tool", "live")]


# -- flaky-tool --------------------------------------------------------------------------------


def test_failure_forks_before_the_node_that_failed() -> None:
    base = record("flaky-tool")
    assert base.state.status == "failed"

    for at in ("failure", None):
        result = fork(base, at=at, dry_run=True)
        assert (result.fork_sequence_id, result.fork_node_id) == (6, "fetch_inventory")


def test_substituting_the_failed_tools_result_completes_the_run() -> None:
    counter = Counter()
    base = record("flaky-tool", counter=counter)
    counter.reset()

    result = fork(base, at="failure",
                  change=change.tool("fetch_inventory", {"region": "eu-west", "in_stock": 7}))

    assert counter.tool_calls == []
    assert result.state.status == "completed"
    assert result.state.error is None
    assert result.state.memory["inventory"] == {"region": "eu-west", "in_stock": 7}
    assert result.state.memory["summary"]
    assert labels(result.calls) == [("fetch_inventory", "tool", "simulated"),
                                    ("summarize", "agent", "live")]
    assert result.diff.terminal == {**result.diff.terminal, "base": "failed",
                                    "variant": "completed"}
    assert result.diff.memory["summary"]["op"] == "added"
    assert result.diff.path["inserted"] == ["summarize"]


def test_an_output_change_substitutes_a_node_without_running_it() -> None:
    base = record("flaky-tool")

    result = fork(base, change=change.output("fetch_inventory",
                                             {"inventory": {"in_stock": 0}}))

    assert result.state.status == "completed"
    assert labels(result.calls)[0] == ("fetch_inventory", "tool", "simulated")


def test_a_completed_run_has_no_default_fork_point() -> None:
    base = record("research-write")
    try:
        fork(base, change=change.prompt("write", "x"))
    except ForkPointNotFound as exc:
        assert exc.code == "fork_point_not_found"
    else:
        raise AssertionError("forking a completed run with at=None must raise")
