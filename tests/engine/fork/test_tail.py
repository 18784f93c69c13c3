"""The tail (SPEC §3.4, §3.10): human gates, reflection writes, provenance and lineage."""

from __future__ import annotations

from forklab.engine import HumanAnswer, change, fork, fork_points
from forklab.engine.fork.core import fork_runner
from forklab.engine.reducers import fold
from tests.engine.fork.helpers import labels, of_type, record, world

# -- human gates ----------------------------------------------------------------------------


def test_a_gate_with_no_answer_and_no_hitl_pauses_the_fork() -> None:
    base = record("order-fulfilment")

    result = fork(base, at={"before_node": "approve"})

    assert result.state.status == "paused"
    assert result.state.pending_human["node"] == "approve"
    assert result.diff.terminal["variant"] == "paused"


def test_a_paused_fork_answered_later_keeps_its_side_effect_guard() -> None:
    base = record("order-fulfilment")
    paused = fork(base, at={"before_node": "approve"},
                  change=change.input_patch({"email": "eve@example.com"}))
    before = world()

    runner = fork_runner(paused.run_id, store=base.store, env=base.env)
    state = runner.answer(HumanAnswer(decision="approved"))

    assert world() == before
    assert state.status == "blocked"
    assert [e["node"] for e in state.suppressed_effects] == ["send_email"]


def test_a_hitl_callback_answers_the_gate_live() -> None:
    base = record("order-fulfilment")
    asked = []

    def hitl(request):
        asked.append(request)
        return HumanAnswer(decision="approved", answered_by="tester")

    result = fork(base, at={"before_node": "approve"}, hitl=hitl)

    assert [r["node"] for r in asked] == ["approve"]
    assert asked[0]["context"] == {"receipt": base.state.memory["receipt"]}
    assert result.state.status == "completed"
    assert labels(result.calls) == [("approve", "human", "live"),
                                    ("send_email", "tool", "reused")]


def test_a_human_response_change_wins_over_hitl() -> None:
    base = record("order-fulfilment")

    result = fork(base, at={"before_node": "approve"}, change=[
        change.config("approve", {"writes": ["approval", "note"]}),  # the key the answer sets
        change.human_response("edited", memory_updates={"note": "wrap it"})],
        hitl=lambda request: HumanAnswer(decision="rejected"))

    assert labels(result.calls)[0] == ("approve", "human", "simulated")
    assert result.state.memory["note"] == "wrap it"
    assert result.state.memory["approval"] == "edited"


def test_with_memoize_a_gate_with_the_same_inputs_is_answered_from_the_recording() -> None:
    base = record("order-fulfilment")

    result = fork(base, at={"before_node": "approve"}, policy={"memoize": True})

    assert result.state.status == "completed"
    assert labels(result.calls)[0] == ("approve", "human", "reused")


# -- reflections ------------------------------------------------------------------------------


def test_reflection_writes_in_a_fork_are_captured_and_discarded() -> None:
    base = record("research-web")
    lessons = base.env.reflections.read("lessons")
    assert lessons == {"How do vaccines work?": base.state.memory["answer"]}

    result = fork(base, at={"before_node": "answer"}, change=change.prompt("answer", "Be brief."))

    assert base.env.reflections.read("lessons") == lessons
    (discarded,) = result.state.discarded_reflections
    assert discarded == {"node": "remember", "store": "lessons", "key": "How do vaccines work?",
                         "value": result.state.memory["answer"]}
    assert discarded["value"] != lessons["How do vaccines work?"]
    assert len(of_type(result.event_log, "reflection.discarded")) == 1
    assert ("remember", "tool", "changed") in labels(result.calls)


def test_taint_follows_the_untrusted_page_through_a_fork() -> None:
    base = record("research-web")

    result = fork(base, at={"before_node": "extract"},
                  change=change.memory(set={"page": {"url": "x", "text": "clean facts"}}))

    moved = {k for k, d in result.diff.memory.items() if d["taint_moved"]}
    assert moved == {"page", "facts", "answer", "remembered"}
    assert result.state.taint == set()
    assert "taint moved" in result.explain()


# -- lineage ----------------------------------------------------------------------------------


def test_a_fork_records_its_lineage_in_its_log() -> None:
    base = record("research-write")

    result = fork(base, at={"before_node": "write"}, change=change.prompt("write", "Be terse."),
                  run_id="variant-terse", fork_group_id="group-1", label="terse")

    assert result.run_id == "variant-terse"
    state = fold(base.store.read("variant-terse"))
    assert state.run_kind == "counterfactual"
    assert state.parent_run_id == base.run_id
    assert state.label == "terse"
    assert state.fork.base_run_id == base.run_id
    assert state.fork.fork_sequence_id == 6
    assert state.fork.fork_node_id == "write"
    assert state.fork.fork_group_id == "group-1"
    assert state.changes == [{"kind": "prompt", "target": "write", "system_prompt": "Be terse."}]
    assert (state.graph_id, state.graph_version) == ("research-write", 1)
    assert state.replay_version == base.state.replay_version
    opening = [e.type for e in result.event_log[:3]]
    assert opening == ["run.started", "run.forked", "change.applied"]
    forked = result.event_log[1]
    assert forked.changes == state.changes
    assert forked.policy == {"side_effects": "replay", "memoize": False}
    assert forked.budget == {"max_live_calls": 50, "max_cost_usd": 1.0}


def test_a_fork_of_a_fork_forms_a_lineage_chain() -> None:
    base = record("research-write")
    first = fork(base, at={"before_node": "write"}, change=change.prompt("write", "Be terse."))

    second = fork(first.run_id, store=base.store, env=base.env, at={"before_node": "write"},
                  change=change.temperature("write", 1.5))

    assert second.base_run_id == first.run_id
    assert second.state.parent_run_id == first.run_id
    assert first.state.parent_run_id == base.run_id
    assert second.state.memory["notes"] == base.state.memory["notes"]
    requested = of_type(second.event_log, "agent.requested")
    assert [(r.system_prompt, r.temperature) for r in requested] == [("Be terse.", 1.5)]
    assert [(p.node, p.run_id) for p in fork_points(second.event_log)] == [
        ("research", base.run_id), ("write", second.run_id), (None, second.run_id)]


def test_a_fork_of_a_memoized_fork_still_serves_recorded_writes() -> None:
    base = record("order-fulfilment")
    before = world()
    memoized = fork(base, at="start", policy={"memoize": True})
    assert {c["label"] for c in memoized.calls} == {"reused"}

    again = fork(memoized.run_id, store=base.store, env=base.env, at="start",
                 change=change.human_response("approved"))

    assert world() == before
    assert again.state.status == "completed"
    assert labels(again.calls) == [
        ("lookup_price", "tool", "live"), ("charge", "tool", "reused"),
        ("approve", "human", "simulated"), ("send_email", "tool", "reused")]


def test_before_node_addresses_the_recorded_occurrence_in_a_forks_own_log() -> None:
    base = record("review-loop")
    variant = fork(base, at={"before_node": "review", "occurrence": 2},
                   change=change.prompt("revise", "Rewrite."))

    point = fork(variant.run_id, store=base.store, env=base.env, dry_run=True,
                 at={"before_node": "review", "occurrence": 3}).point

    assert (point.node, point.occurrence) == ("review", 3)
    started = next(e for e in variant.event_log if e.seq == point.seq + 1)
    assert (started.node, started.occurrence) == ("review", 3)


def test_every_call_of_a_tail_carries_one_provenance_label() -> None:
    base = record("diamond")

    result = fork(base, at="start", change=change.prompt("left", "x"), policy={"memoize": True})

    assert result.calls
    for call in result.calls:
        assert call["label"] in ("reused", "live", "simulated", "changed")
        assert set(call) >= {"node", "role", "kind", "label", "model", "input_tokens",
                             "output_tokens", "cost_usd"}
    wire = result.to_wire()
    assert wire["calls"] == result.calls
    assert wire["memo_hits"] == result.memo_hits
    assert wire["explain"] == result.explain()
