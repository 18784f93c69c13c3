"""The mapping of the golden traces (real instrumentations' exports) equals their golden
event logs (tests/traces/golden.py says how to regenerate them on purpose)."""

from __future__ import annotations

import pytest

from forklab.engine.reducers import fold
from forklab.engine.status import RunStatus
from tests.traces.golden import CASES, load, mapped


@pytest.mark.parametrize("case", CASES)
def test_a_golden_trace_maps_to_its_golden_log(case: str) -> None:
    trace, events = load(case)
    assert mapped(trace) == events


@pytest.mark.parametrize("case", CASES)
def test_a_golden_log_folds_to_a_completed_run_with_the_tool_loops_keys(case: str) -> None:
    from forklab.engine.events import from_wire

    _, events = load(case)
    state = fold([from_wire(e) for e in events])
    assert state.status == RunStatus.COMPLETED
    assert [c.call for c in state.calls] == [
        "weather_agent#1/turn:1", "weather_agent#1/turn:1/tool:1", "weather_agent#1/turn:2"]
