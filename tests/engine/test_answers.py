"""What an answer to an approval gate may write (engine/answers.py).

A gate declares its memory in ``writes`` like every node: the first key receives the
decision, the keys after it are the ones an answer's ``memory_updates`` may set. Any other
key is refused (``invalid_overrides``, limit ``writes``) before anything is recorded — as an
output change naming a key outside its node's writes is refused, and a tool returning one
fails its node.
"""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import fork_check, replay
from forklab.engine.answers import answer_keys, check_answer
from forklab.engine.canonical import canonical_equals
from forklab.engine.environment import counter_ids
from forklab.engine.errors import InvalidOverrides
from forklab.engine.fork.continuing import answer_run
from forklab.engine.graph import ApprovalNode
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import load_run
from forklab.engine.store import MemoryStore
from tests.engine.test_runner_behaviour import approval_graph, make_env, record


def gate(*writes: str) -> ApprovalNode:
    return ApprovalNode(id="approve", reads=["draft"], writes=list(writes))


# -- the rule ---------------------------------------------------------------------------------


def test_an_answer_may_set_the_keys_the_gate_declares_after_its_decision_key() -> None:
    node = gate("approval", "draft", "note")

    assert answer_keys(node) == ["draft", "note"]
    check_answer(node, {"draft": "better", "note": "gift"})
    check_answer(node, {})
    check_answer(node, None)
    check_answer(gate(), {})  # a gate writing nothing takes answers without updates


def test_an_undeclared_key_is_refused_naming_its_path_the_accepted_keys_and_the_fix() -> None:
    with pytest.raises(InvalidOverrides) as caught:
        check_answer(gate("approval", "draft"), {"note": "gift", "draft": "ok", "zz": 1})

    error = caught.value
    assert error.code == "invalid_overrides"
    assert error.context == {"limit": "writes", "field": "memory_updates.note",
                             "node": "approve", "expected": ["draft"],
                             "undeclared": ["note", "zz"]}
    assert error.message == (
        "an answer to approval gate 'approve' may set only the memory keys the gate declares "
        "in its 'writes' after the decision key ('draft'); memory_updates.note, "
        "memory_updates.zz are not declared: leave them out, or declare them in the gate's "
        "'writes' after its decision key (writes: [approval, draft, note, zz])")


def test_a_gate_declaring_only_its_decision_key_accepts_no_memory_updates() -> None:
    with pytest.raises(InvalidOverrides, match=r"after the decision key \(none\)"):
        check_answer(gate("approval"), {"draft": "better"})


def test_every_refused_key_is_named_the_decision_key_too() -> None:
    with pytest.raises(InvalidOverrides) as caught:
        check_answer(gate("approval", "draft"), {"a": 1, "approval": "x", "draft": "ok"})

    message = caught.value.message
    assert "memory_updates.a is not declared" in message
    assert "memory_updates.approval would overwrite 'approval'" in message
    assert message.endswith("(writes: [approval, draft, a]); leave 'approval' out")


def test_the_decision_key_is_not_an_answers_to_overwrite() -> None:
    with pytest.raises(InvalidOverrides) as caught:
        check_answer(gate("approval", "draft"), {"approval": "approved"})

    assert caught.value.context["field"] == "memory_updates.approval"
    assert "would overwrite 'approval', which holds the decision" in caught.value.message


def test_a_key_that_is_no_identifier_is_named_by_its_bracketed_path() -> None:
    with pytest.raises(InvalidOverrides) as caught:
        check_answer(gate("approval"), {"gift wrap": True})

    assert caught.value.context["field"] == "memory_updates['gift wrap']"


# -- a paused run's answer --------------------------------------------------------------------


def _paused(**writes: Any) -> tuple[MemoryStore, str]:
    store = MemoryStore()
    paused = record(approval_graph(**writes), store=store)
    assert paused.state.status == "paused"
    return store, paused.run_id


def test_answering_a_paused_run_with_an_undeclared_key_records_nothing_and_keeps_it_paused(
) -> None:
    store, run_id = _paused()
    before = store.read(run_id)

    with pytest.raises(InvalidOverrides) as caught:
        answer_run(run_id, HumanAnswer(decision="edited", memory_updates={"draft": "mine"}),
                   store=store, env=make_env())

    assert caught.value.context["field"] == "memory_updates.draft"
    assert store.read(run_id) == before
    state = load_run(run_id, store=store).state
    assert state.status == "paused" and state.memory["draft"] == "first draft"

    done = answer_run(run_id, HumanAnswer(decision="approved"), store=store, env=make_env())
    assert done.state.status == "completed"  # the gate still takes a valid answer


def test_answering_a_paused_run_with_a_declared_key_applies_it() -> None:
    store, run_id = _paused(answer_writes=("draft",))

    done = answer_run(run_id, HumanAnswer(decision="edited", memory_updates={"draft": "mine"}),
                      store=store, env=make_env())

    assert done.state.status == "completed"
    assert done.memory["approval"] == "edited"
    assert done.memory["published"]["draft"] == "mine"


# -- a hitl callback's answer -----------------------------------------------------------------


def test_a_hitl_answer_with_an_undeclared_key_fails_its_node_and_writes_nothing() -> None:
    recorded = record(approval_graph(), hitl=lambda request: HumanAnswer(
        decision="edited", memory_updates={"draft": "mine"}))

    assert recorded.state.status == "failed"
    failed = [e for e in recorded.event_log if e.type == "node.failed"]
    assert [(e.node, e.error["type"]) for e in failed] == [("approve", "invalid_overrides")]
    assert "memory_updates.draft is not declared" in failed[0].error["message"]
    assert not [e for e in recorded.event_log if e.type == "human.answered"]
    assert recorded.memory["draft"] == "first draft"
    assert "approval" not in recorded.memory


# -- an answer recorded before the rule -------------------------------------------------------


def test_a_log_recorded_before_the_rule_replays_and_forkchecks_as_it_was_recorded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer re-served from a log (strict replay, forkcheck) is applied as recorded: a
    recording made when gates took any key stays reproducible, not drift."""
    store = MemoryStore()
    with monkeypatch.context() as before_the_rule:
        before_the_rule.setattr("forklab.engine.nodes.check_answer", lambda *a, **k: None)
        old = record(approval_graph(), store=store, hitl=lambda request: HumanAnswer(
            decision="edited", memory_updates={"draft": "mine"}))
    assert old.state.status == "completed" and old.memory["published"]["draft"] == "mine"

    replayed = replay(old.run_id, store=store, env=make_env())
    assert canonical_equals(replayed.outcome(), old.state.outcome())
    # the check reads through to ``store`` (as a fork does): its runs need ids not stored
    checker = make_env()
    checker.ids = counter_ids("check")
    results = fork_check(old.run_id, store=store, env=checker)
    assert results and all(r.ok for r in results), [r.to_wire() for r in results if not r.ok]
