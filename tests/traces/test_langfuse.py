"""A Langfuse trace export (the public API's trace with its observations) read as a run:
the same calls and keys as the spans a GenAI instrumentation would have sent."""

from __future__ import annotations

import json
from typing import Any

from forklab.engine.events import AgentRequested, ToolReturned
from forklab.engine.reducers import fold
from forklab.engine.traces import map_trace
from forklab.engine.traces.langfuse import is_langfuse, read_langfuse

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "lookup", "arguments": json.dumps({"q": "x"})}}


def export() -> dict[str, Any]:
    """Shaped after GET /api/public/traces/{id} (ids as Langfuse makes them)."""
    return {
        "id": "6f1c7f8e-2a39-4c1b-9a51-0f5c2f3e9d10", "name": "support", "sessionId": "s-1",
        "timestamp": "2026-12-07T10:00:00.000Z",
        "observations": [
            {"id": "obs-agent", "type": "AGENT", "name": "helper",
             "startTime": "2026-12-07T10:00:00.100Z", "endTime": "2026-12-07T10:00:03Z"},
            {"id": "obs-g1", "type": "GENERATION", "name": "ChatOpenAI",
             "parentObservationId": "obs-agent", "model": "gpt-4o",
             "modelParameters": {"temperature": 0.3},
             "startTime": "2026-12-07T10:00:00.200Z", "endTime": "2026-12-07T10:00:01Z",
             "input": [{"role": "system", "content": "Be useful."},
                       {"role": "user", "content": "find x"}],
             "output": {"role": "assistant", "content": None, "tool_calls": [CALL]},
             "usage": {"input": 30, "output": 8, "total": 38, "unit": "TOKENS"}},
            {"id": "obs-t1", "type": "TOOL", "name": "lookup",
             "parentObservationId": "obs-agent", "input": {"q": "x"}, "output": "found",
             "startTime": "2026-12-07T10:00:01.100Z", "endTime": "2026-12-07T10:00:01.200Z"},
            {"id": "obs-e", "type": "EVENT", "name": "note",
             "parentObservationId": "obs-agent", "startTime": "2026-12-07T10:00:01.300Z"},
            {"id": "obs-g2", "type": "GENERATION", "name": "ChatOpenAI",
             "parentObservationId": "obs-agent", "model": "gpt-4o",
             "startTime": "2026-12-07T10:00:02Z", "endTime": "2026-12-07T10:00:02.500Z",
             "input": [{"role": "user", "content": "find x"},
                       {"role": "assistant", "content": None, "tool_calls": [CALL]},
                       {"role": "tool", "tool_call_id": "call_1", "content": "found"}],
             "output": "x is found", "usageDetails": {"input": 50, "output": 4}},
        ]}


def test_a_langfuse_trace_becomes_the_tool_loops_calls() -> None:
    data = export()
    assert is_langfuse(data) and is_langfuse({"data": [data]}) and not is_langfuse({})
    spans, rejected = read_langfuse(data)
    assert [r.reason for r in rejected] == [
        "a Langfuse EVENT observation (a point in time, not a call)"]
    run = map_trace(spans, run_id="r")
    state = fold(run.events)
    assert [c.call for c in state.calls] == [
        "helper#1/turn:1", "helper#1/turn:1/tool:1", "helper#1/turn:2"]
    assert state.label == "support" and state.memory == {"helper": "x is found"}
    assert (state.input_tokens, state.output_tokens) == (80, 12)
    asked = [e for e in run.events if isinstance(e, AgentRequested)]
    assert (asked[0].system_prompt, asked[0].temperature) == ("Be useful.", 0.3)
    assert asked[1].messages[2] == {"role": "tool", "tool_call_id": "call_1",
                                    "content": "found"}
    assert [e.result for e in run.events if isinstance(e, ToolReturned)] == ["found"]
    assert run.conversation == "s-1"
    assert run.trace_id == "6f1c7f8e2a394c1b9a510f5c2f3e9d10"  # the UUID, as hex
    # a first turn with tools in play but no definitions exported: inspect-only, said so
    assert run.calls[0]["missing"] == ["tool definitions"]
