"""Two changes that write the same thing are refused, never ordered (issue 8 point 6).

Refused with ``conflicting_changes`` naming both, at preflight (``prepare_fork``: what
``POST /forks/preflight/`` runs) and at fork time, before anything is written.
"""

from __future__ import annotations

import pytest

from forklab.engine import change, fork, prepare_fork
from forklab.engine.errors import ConflictingChanges
from tests.engine.fork.helpers import record

PAIRS = [
    ("panel-vote", change.model("vote.voters", "scripted-large"),
     change.model("vote.voters[1]", "scripted-small")),
    ("panel-vote", change.temperature("vote.voters[2]", 0.1),
     change.temperature("vote.voters[2]", 0.2)),
    ("flaky-tool", change.output("fetch_inventory", {"inventory": {}}),
     change.tool("fetch_inventory", {"in_stock": 1})),
    ("research-write", change.output("write", {"draft": "x"}), change.prompt("write", "Be brief.")),
    ("order-fulfilment", change.memory(set={"email": "a@example.com"}),
     change.input_patch({"email": "b@example.com"})),
    ("order-fulfilment", change.memory(set={"order": {"qty": 1}}),
     change.input_patch({"order": {"qty": 5}})),
    ("research-write", change.config("write", {"agent": {"model": "scripted-small"}}),
     change.model("write", "scripted-large")),
    ("panel-vote", change.config("vote", {"roles": {"voters": {"instances": {"1": {
        "model": "scripted-small"}}}}}), change.model("vote.voters", "scripted-large")),
    ("research-write", change.config("write", {"prompt": "Goal: {goal}"}),
     change.output("write", {"draft": "x"})),
    ("triage-router", change.route("route", "escalate"), change.route("route", "reply")),
]


@pytest.mark.parametrize(("name", "first", "second"), PAIRS,
                         ids=[f"{a.kind}+{b.kind}" for _, a, b in PAIRS])
def test_two_changes_writing_the_same_thing_are_refused_naming_both(name, first, second) -> None:
    base = record(name)
    runs = base.store.run_ids()

    for attempt in (lambda: prepare_fork(base, at="start", change=[first, second]),
                    lambda: fork(base, at="start", change=[second, first])):
        with pytest.raises(ConflictingChanges) as raised:
            attempt()
        assert raised.value.code == "conflicting_changes"
        assert first.describe() in raised.value.message
        assert second.describe() in raised.value.message
        assert raised.value.context["changes"] in ([first.wire(), second.wire()],
                                                   [second.wire(), first.wire()])

    assert base.store.run_ids() == runs


@pytest.mark.parametrize("changes", [
    [change.model("vote.voters[0]", "scripted-large"), change.model("vote.voters[1]", "x-1")],
    [change.model("vote.voters", "scripted-large"), change.model("vote.judge", "scripted-mini")],
    [change.input_patch({"coupon": None}), change.input_patch({"email": "b@example.com"})],
    [change.input_patch({"order": {"qty": 3}}), change.input_patch({"order": {"sku": "X"}})],
    [change.output("charge", {"receipt": {}}), change.memory(set={"receipt": {"id": "r"}})],
], ids=["two-instances", "two-roles", "two-input-keys", "two-nested-input-keys",
        "output-and-memory-at-different-times"])
def test_changes_writing_different_things_do_not_conflict(changes) -> None:
    name = "panel-vote" if changes[0].kind == "model" else "order-fulfilment"
    prepare_fork(record(name), at="start", change=changes, ignore_budget=True,
                 budget={"max_cost_usd": None})


def test_two_input_patches_of_different_keys_both_apply() -> None:
    base = record("order-fulfilment")

    plan = prepare_fork(base, at="start", change=[
        change.input_patch({"coupon": None}), change.input_patch({"order": {"qty": 3}})])

    assert plan.new_input["order"] == {"sku": "WIDGET-1", "qty": 3}
    assert "coupon" not in plan.new_input
