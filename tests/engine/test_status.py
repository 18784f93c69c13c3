"""Statuses and labels are one closed set of words, spelled as stored logs spell them."""

import json

from forklab.engine.state import RunState
from forklab.engine.status import (
    CALL_LABELS,
    EXECUTION_STATUSES,
    FINISHED_STATUSES,
    ForkState,
    RunKind,
    RunStatus,
)


def test_the_wire_words_do_not_move():
    # Stored logs, snapshots and database rows hold these strings: renaming one is a migration.
    assert RunStatus.values() == ["queued", "running", "paused", "completed", "failed",
                                  "blocked", "cancelled"]
    assert RunKind.values() == ["primary", "subgraph", "counterfactual"]
    assert ForkState.values() == ["queued", "running", "paused", "complete", "failed",
                                  "blocked", "not_run", "cancelled"]
    assert CALL_LABELS == ("reused", "live", "simulated", "changed", "blocked")
    assert set(EXECUTION_STATUSES) == {"running", "paused", "completed", "failed",
                                       "interrupted", "blocked", "cancelled"}


def test_a_status_is_its_string_in_json_and_in_comparisons():
    assert json.dumps({"status": RunStatus.PAUSED}) == '{"status": "paused"}'
    assert f"{RunStatus.FAILED}" == "failed"
    assert RunStatus.COMPLETED == "completed" and "completed" in FINISHED_STATUSES


def test_a_state_read_back_carries_the_enum():
    state = RunState.from_wire({**RunState().to_wire(), "status": "blocked",
                                "run_kind": "counterfactual"})
    assert state.status is RunStatus.BLOCKED and state.run_kind is RunKind.COUNTERFACTUAL
    assert state.finished
    assert json.dumps(state.to_wire()) == json.dumps(
        {**RunState().to_wire(), "status": "blocked", "run_kind": "counterfactual"})
