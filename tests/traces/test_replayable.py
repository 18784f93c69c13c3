"""Each imported call's status and badge, read back from ``trace.imported`` by call key
(forklab.engine.traces.replayable): what every surface shows beside a call."""

from __future__ import annotations

from typing import Any

from forklab.engine.events import TraceImported
from forklab.engine.traces import genai, map_trace, openinference
from forklab.engine.traces.replayable import ImportedCalls, badge, calls_json, status
from tests.traces.test_mapping import mixed_capture, span


def _payload() -> dict[str, object]:
    (imported,) = [e for e in map_trace(mixed_capture(), run_id="r").events
                   if isinstance(e, TraceImported)]
    return imported.payload()


def test_statuses_by_call_key_and_their_badges() -> None:
    calls = ImportedCalls.from_payload(_payload())
    first = calls.of("researcher#1/turn:1")
    second = calls.of("researcher#1/turn:2")
    assert first == {"replayable": True}
    assert second == {"replayable": False, "missing": ["request messages", "reply"],
                      "capture_hint": genai.CAPTURE_HINT}
    assert badge(first) == "replayable"
    assert badge(second) == ("inspect-only — missing: request messages, reply; turn on: "
                             + genai.CAPTURE_HINT)
    assert calls.of("researcher#1/turn:3") is None


def test_the_run_json_lists_every_call_with_its_status() -> None:
    listed = calls_json(_payload())
    assert [(c["call"], c["kind"], c["replayable"]) for c in listed] == [
        ("researcher#1/turn:1", "agent", True), ("researcher#1/turn:1/tool:1", "tool", False),
        ("researcher#1/turn:2", "agent", False)]
    assert "missing" not in listed[0] and listed[1]["missing"] == ["tool result"]


def test_a_tool_span_no_turn_asked_for_is_found_by_its_execution_and_order() -> None:
    tool: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "x"}
    run = map_trace([span(1, "app"), span(2, "tool x", 1, **tool)], run_id="r")
    calls = ImportedCalls.from_payload({"calls": run.calls})
    found = calls.of(None, execution="app#1", index=0)
    assert found is not None and found["missing"] == ["tool arguments", "tool result"]
    assert calls.of(None, execution="app#1", index=1) is None


def test_info_written_without_a_hint_gets_its_dialects() -> None:
    """Import info stored before tool calls carried a hint still says how to capture."""
    assert status({"replayable": False, "missing": ["tool result"]})["capture_hint"] == \
        genai.CAPTURE_HINT
    assert status({"replayable": False, "missing": ["reply"], "dialect": "openinference"}
                  )["capture_hint"] == openinference.CAPTURE_HINT
