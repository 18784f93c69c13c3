"""Golden event logs (``tests/engine/golden/*.json``) still fold, and the engine still writes them.

Regenerate after an intended change with ``python -m tests.engine.golden_tool regenerate``
(see ``golden_tool``'s docstring).
"""

from __future__ import annotations

import pytest

from forklab.engine.canonical import canonical_equals, canonical_json
from forklab.engine.events import from_wire
from forklab.engine.reducers import fold
from forklab.engine.scenarios import SCENARIOS
from tests.engine.golden_tool import first_difference, golden_path, load_golden, record_scenario

NAMES = sorted(SCENARIOS)


def _first_state_difference(expected: dict, actual: dict) -> str:
    for key in sorted(set(expected) | set(actual)):
        if not canonical_equals(expected.get(key), actual.get(key)):
            return (f"state key {key!r}: golden {canonical_json(expected.get(key))[:300]} "
                    f"!= folded {canonical_json(actual.get(key))[:300]}")
    return "states differ only in representation"


def test_every_scenario_has_a_golden_log() -> None:
    missing = [name for name in NAMES if not golden_path(name).exists()]
    assert not missing, (f"no golden log for {missing}; run "
                         "`python -m tests.engine.golden_tool regenerate`")


@pytest.mark.parametrize("name", NAMES)
def test_golden_log_folds_to_its_recorded_final_state(name: str) -> None:
    golden = load_golden(name)
    events = [from_wire(wire) for wire in golden["events"]]

    state = fold(events)

    assert golden["scenario"] == name
    assert canonical_equals(state.to_wire(), golden["final_state"]), _first_state_difference(
        golden["final_state"], state.to_wire())


@pytest.mark.parametrize("name", NAMES)
def test_golden_events_round_trip_through_their_wire_form(name: str) -> None:
    golden = load_golden(name)

    rewired = [from_wire(wire).to_wire() for wire in golden["events"]]

    assert first_difference(golden["events"], rewired) is None


@pytest.mark.parametrize("name", NAMES)
def test_recording_the_scenario_today_reproduces_its_golden_log(name: str) -> None:
    golden = load_golden(name)

    fresh = record_scenario(name)

    assert canonical_equals(fresh["input"], golden["input"]), "the scenario's input changed"
    problem = first_difference(golden["events"], fresh["events"])
    assert problem is None, (
        f"{name}: the engine no longer records the golden log. {problem}\nIf the change is "
        "intended, run `python -m tests.engine.golden_tool regenerate` and review the diff."
    )
    assert canonical_equals(fresh["final_state"], golden["final_state"]), (
        _first_state_difference(golden["final_state"], fresh["final_state"]))


def test_golden_flaky_tool_log_records_the_failure_it_exists_to_show() -> None:
    golden = load_golden("flaky-tool")

    types = [wire["type"] for wire in golden["events"]]

    assert types[-2:] == ["node.failed", "run.failed"]
    assert golden["final_state"]["status"] == "failed"
    assert golden["final_state"]["error"]["node"] == "fetch_inventory"
    assert "timed out" in golden["final_state"]["error"]["message"]
    assert "summary" not in golden["final_state"]["memory"]


def test_golden_logs_have_contiguous_sequences_starting_at_one() -> None:
    for name in NAMES:
        seqs = [wire["seq"] for wire in load_golden(name)["events"]]
        assert seqs == list(range(1, len(seqs) + 1)), name


def test_a_tampered_golden_log_no_longer_folds_to_its_final_state() -> None:
    golden = load_golden("research-write")
    wires = golden["events"]
    written = next(i for i, w in enumerate(wires) if w["type"] == "memory.written")
    wires[written]["payload"]["value"] = "something else entirely"

    state = fold(from_wire(wire) for wire in wires)

    assert not canonical_equals(state.to_wire(), golden["final_state"])
