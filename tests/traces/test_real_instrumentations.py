"""The importer over spans made by the real instrumentation packages (SPEC §8 "In"):
opentelemetry-instrumentation-openai-v2 (GenAI) and openinference-instrumentation-openai,
instrumenting the official ``openai`` client calling the vendor stub."""

from __future__ import annotations

from typing import Any

from google.protobuf.json_format import MessageToDict

from forklab.engine.events import AgentRequested, AgentResponded, ToolCalled, ToolReturned
from forklab.engine.reducers import fold
from forklab.engine.status import RunStatus
from forklab.engine.traces import ImportedRun, decode_protobuf, map_trace, read_otlp_json
from tests.traces.spans import (
    GENAI_CONTENT,
    GENAI_EVENTS,
    GENAI_NO_CONTENT,
    OPENINFERENCE_HIDDEN,
    QUESTION,
    SYSTEM,
    tool_conversation,
    traced,
)
from tests.vendor_stub import VendorStub

KEYS = ["weather_agent#1/turn:1", "weather_agent#1/turn:1/tool:1", "weather_agent#1/turn:2"]


def _imported(request: Any) -> ImportedRun:
    """The run of the export request's one trace, read from its protobuf bytes."""
    spans, rejected = read_otlp_json(decode_protobuf(request.SerializeToString()))
    assert not rejected
    return map_trace(spans, run_id="imported")


def _of(run: ImportedRun, cls: type[Any]) -> list[Any]:
    return [e for e in run.events if isinstance(e, cls)]


def _info(run: ImportedRun) -> dict[str, dict[str, Any]]:
    return {c["call"]: c for c in run.calls}


def _assert_tool_conversation(run: ImportedRun) -> None:
    state = fold(run.events)
    assert state.status == RunStatus.COMPLETED
    assert [call.call for call in state.calls] == KEYS
    asked, answered = _of(run, AgentRequested), _of(run, AgentResponded)
    assert [a.call for a in asked] == [None, "turn:2"]  # as the tool loop stores them
    assert [a.model for a in asked] == ["gpt-4o-mini"] * 2
    assert [a.temperature for a in asked] == [0.2, 0.2]
    tool_call = answered[0].tool_calls[0]
    assert tool_call["name"] == "get_weather" and tool_call["id"].startswith("call_")
    (called,) = _of(run, ToolCalled)
    assert (called.call, called.tool, called.call_id) == (
        "turn:1/tool:1", "get_weather", tool_call["id"])
    assert called.args == tool_call["arguments"]
    assert answered[0].input_tokens > 0 and answered[0].output_tokens > 0
    assert answered[0].cost_usd is not None and answered[0].cost_usd > 0  # priced
    assert state.input_tokens == sum(a.input_tokens for a in answered)


def test_genai_spans_with_content_become_the_tool_loops_calls(stub: VendorStub) -> None:
    run = _imported(tool_conversation(stub, "genai", GENAI_CONTENT))
    _assert_tool_conversation(run)
    asked = _of(run, AgentRequested)
    assert asked[0].system_prompt == SYSTEM
    assert asked[0].messages == [{"role": "user", "content": QUESTION}]
    assert asked[1].messages[1]["tool_calls"][0]["name"] == "get_weather"
    assert asked[1].messages[2] == {"role": "tool",
                                    "tool_call_id": asked[1].messages[1]["tool_calls"][0]["id"],
                                    "content": "sunny"}
    (returned,) = _of(run, ToolReturned)
    assert returned.result == "sunny"  # from the next request's tool message
    assert _of(run, AgentResponded)[1].text == "Results: get_weather=sunny"  # the stub's
    info = _info(run)
    # openai-v2 records no tool definitions: a turn with tools in play cannot be re-asked
    # as it was, and says so
    assert info[KEYS[0]]["replayable"] is False
    assert info[KEYS[0]]["missing"] == ["tool definitions"]
    assert info[KEYS[1]] == {"call": KEYS[1], "kind": "tool", "span_id": None,
                             "replayable": True, "missing": [],
                             "result_from": "next request"}


def test_a_genai_call_without_tools_with_content_is_replayable(stub: VendorStub) -> None:
    run = _imported(tool_conversation(stub, "genai", GENAI_CONTENT, tools=False))
    (info,) = run.calls
    assert info["replayable"] is True and info["missing"] == []
    (answered,) = _of(run, AgentResponded)
    assert answered.text and answered.finish_reason == "stop"


def test_genai_spans_without_content_are_inspect_only_and_say_how_to_capture(
        stub: VendorStub) -> None:
    run = _imported(tool_conversation(stub, "genai", GENAI_NO_CONTENT))
    asked = _of(run, AgentRequested)
    assert [a.messages for a in asked] == [[], []]  # nothing guessed
    # the tool call was never seen (no reply content): two turns, no tool call invented
    assert [c.call for c in fold(run.events).calls] == [KEYS[0], KEYS[2]]
    first = run.calls[0]
    assert first["replayable"] is False
    assert first["missing"] == ["request messages", "reply"]
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in first["capture_hint"]
    assert fold(run.events).calls[0].input_tokens > 0  # usage is still there


def test_openinference_spans_become_the_tool_loops_calls_and_are_replayable(
        stub: VendorStub) -> None:
    run = _imported(tool_conversation(stub, "openinference", {}))
    _assert_tool_conversation(run)
    asked = _of(run, AgentRequested)
    assert asked[0].system_prompt == SYSTEM
    assert asked[0].tools == [{"name": "get_weather", "description": "The weather in a city.",
                               "parameters": {"type": "object",
                                              "properties": {"city": {"type": "string"}},
                                              "required": ["city"]}}]
    assert [c["replayable"] for c in run.calls] == [True, True, True]


def test_openinference_spans_with_hidden_content_are_inspect_only(stub: VendorStub) -> None:
    run = _imported(tool_conversation(stub, "openinference", OPENINFERENCE_HIDDEN))
    first = run.calls[0]
    assert first["replayable"] is False
    assert "request messages" in first["missing"] and "reply" in first["missing"]
    assert "OPENINFERENCE_HIDE_INPUTS" in first["capture_hint"]


def test_the_json_and_protobuf_bodies_of_one_export_map_to_equal_runs(
        stub: VendorStub) -> None:
    request = tool_conversation(stub, "openinference", {})
    from_json = read_otlp_json(MessageToDict(request))[0]
    assert from_json == read_otlp_json(decode_protobuf(request.SerializeToString()))[0]
    # OTLP/JSON proper writes ids as hex: read the same
    hexed = MessageToDict(request)
    for resource in hexed["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        import base64
                        span[key] = base64.b64decode(span[key]).hex()
    assert read_otlp_json(hexed)[0] == from_json


def test_genai_content_sent_as_log_events_is_put_on_its_spans(stub: VendorStub) -> None:
    from forklab.engine.traces.logs import attach, decode_logs_protobuf, read_otlp_logs_json

    spans_request, logs_request = traced(stub, "genai", GENAI_EVENTS, tools=False)
    spans, _ = read_otlp_json(decode_protobuf(spans_request.SerializeToString()))
    events, rejected = read_otlp_logs_json(decode_logs_protobuf(
        logs_request.SerializeToString()))
    assert events and not rejected
    assert not map_trace(spans, run_id="r").calls[0]["replayable"]  # the spans alone
    run = map_trace(attach(spans, reversed(events)), run_id="r")
    (info,) = run.calls
    assert info["replayable"] is True
    (asked,) = _of(run, AgentRequested)
    assert (asked.system_prompt, asked.messages) == (SYSTEM, [{"role": "user",
                                                               "content": QUESTION}])
    assert _of(run, AgentResponded)[0].text
