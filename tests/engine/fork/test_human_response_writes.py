"""A fork's human_response change writes only keys its gates declare, refused at preflight.

The change names no gate: it answers every approval gate the tail reaches, so each key its
``memory_updates`` set must be one every gate of the fork's effective graph declares after
its decision key. Refused (``invalid_overrides``) before anything runs — no run is stored,
no model or tool is called — by ``prepare_fork``, ``fork``, sweeps and their estimate alike.
"""

from __future__ import annotations

import pytest

from forklab.engine import change, estimate_sweep, fork, fork_each, prepare_fork
from forklab.engine.errors import InvalidOverrides
from forklab.engine.graph import parse_graph
from forklab.engine.oracle import HumanAnswer
from forklab.engine.scenarios import SCENARIOS
from tests.engine.fork.helpers import Counter, graph_with, labels, record, world

AT = {"before_node": "approve"}
NOTE = change.human_response("edited", memory_updates={"note": "gift wrap"})


def test_preflight_refuses_an_undeclared_key_naming_the_gate_and_the_path() -> None:
    base = record("order-fulfilment")

    with pytest.raises(InvalidOverrides) as caught:
        prepare_fork(base, at=AT, change=NOTE)

    error = caught.value
    assert error.to_dict() == {
        "code": "invalid_overrides", "limit": "writes", "field": "memory_updates.note",
        "node": "approve", "expected": [], "undeclared": ["note"], "kind": "human_response",
        "detail": (
            "a human_response change answering approval gate 'approve' may set only the "
            "memory keys the gate declares in its 'writes' after the decision key (none); "
            "memory_updates.note is not declared: leave it out, or declare it in the gate's "
            "'writes' after its decision key (writes: [approval, note]) — in the graph, or "
            "with a config change of 'approve' in this fork")}


def test_a_refused_fork_runs_nothing_and_stores_nothing() -> None:
    counter = Counter()
    base = record("order-fulfilment", counter=counter)
    runs, outside = base.store.run_ids(), world()
    counter.reset()

    with pytest.raises(InvalidOverrides):
        fork(base, at=AT, change=NOTE)

    assert base.store.run_ids() == runs
    assert world() == outside
    assert counter.model_calls == [] and counter.tool_calls == []


def test_a_sweep_and_its_estimate_refuse_the_variant_before_anything_is_spent() -> None:
    base = record("order-fulfilment")

    with pytest.raises(InvalidOverrides):
        estimate_sweep(base, at=AT, variants={"note": NOTE})
    result = fork_each(base, at=AT, variants={"note": NOTE,
                                              "plain": change.human_response("approved")})
    assert result.errors["note"]["code"] == "invalid_overrides"
    assert result.errors["note"]["field"] == "memory_updates.note"
    assert "plain" not in result.errors and result.results["plain"].state.status == "completed"


def test_a_key_the_gate_declares_is_accepted_and_written() -> None:
    graph = graph_with(SCENARIOS["order-fulfilment"].graph(), "approve",
                       writes=["approval", "note"])
    base = record("order-fulfilment", graph=graph)

    result = fork(base, at=AT, change=NOTE)

    assert result.state.memory["note"] == "gift wrap"
    assert labels(result.calls)[0] == ("approve", "human", "simulated")


@pytest.mark.parametrize("config_first", [True, False])
def test_a_config_change_of_the_gate_in_the_same_fork_declares_the_key(
        config_first: bool) -> None:
    base = record("order-fulfilment")
    declare = change.config("approve", {"writes": ["approval", "note"]})

    result = fork(base, at=AT, change=[declare, NOTE] if config_first else [NOTE, declare])

    assert result.state.memory["note"] == "gift wrap"  # the order of the list is no matter


def test_the_decision_key_cannot_be_overwritten_by_the_change() -> None:
    base = record("order-fulfilment")

    with pytest.raises(InvalidOverrides) as caught:
        prepare_fork(base, at=AT, change=change.human_response(
            "rejected", memory_updates={"approval": "approved"}))

    assert caught.value.context["field"] == "memory_updates.approval"


def test_every_gate_the_change_may_answer_must_declare_the_key() -> None:
    graph = SCENARIOS["order-fulfilment"].graph()
    data = graph.to_wire()
    data["nodes"] = [{**n, "writes": ["approval", "note"]} if n["id"] == "approve" else n
                     for n in data["nodes"]]
    data["nodes"].append({"id": "confirm", "kind": "approval", "reads": ["email_status"],
                          "writes": ["confirmed"]})
    data["edges"] = [*data["edges"], {"from": "send_email", "to": "confirm"}]
    base = record("order-fulfilment", graph=parse_graph(data), hitl=lambda request: (
        HumanAnswer(decision="approved")))

    with pytest.raises(InvalidOverrides) as caught:
        prepare_fork(base, at="start", change=NOTE)

    assert caught.value.context["node"] == "confirm"


def test_an_inherited_answer_is_checked_against_the_fork_of_a_forks_graph() -> None:
    base = record("order-fulfilment")
    first = fork(base, at=AT, change=[
        change.config("approve", {"writes": ["approval", "note"]}), NOTE])
    assert first.state.memory["note"] == "gift wrap"

    with pytest.raises(InvalidOverrides) as caught:  # its config change takes 'note' back
        prepare_fork(first.run_id, at=AT, store=base.store, env=base.env,
                     change=change.config("approve", {"writes": ["approval"]}))

    assert caught.value.context["field"] == "memory_updates.note"
    assert caught.value.message.startswith(
        "the inherited human_response change answering approval gate 'approve'")
    assert caught.value.message.endswith("; or give this fork its own human_response change")

    own = prepare_fork(first.run_id, at=AT, store=base.store, env=base.env, change=[
        change.config("approve", {"writes": ["approval"]}), change.human_response("approved")])
    assert own.changes  # its own answer replaces the inherited one: accepted
