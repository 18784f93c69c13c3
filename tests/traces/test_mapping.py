"""The pure mapping of spans to a run (forklab.engine.traces): hand-made spans for what the
real instrumentations do not emit here (legacy per-message events, execute_tool spans,
agents under a workflow, errors), and properties over any order and repeats."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forklab.engine.events import CallFailed, ToolCalled, ToolReturned
from forklab.engine.reducers import fold
from forklab.engine.status import RunStatus
from forklab.engine.traces import SpanRecord, genai, map_trace
from forklab.engine.traces.otlp import SpanEvent

TRACE = "0af7651916cd43dd8448eb211c80319c"


def span(n: int, name: str, parent: int | None = None, start: int = 0, end: int = 0,
         status: int = 0, events: tuple[SpanEvent, ...] = (), **attributes: Any) -> SpanRecord:
    return SpanRecord(trace_id=TRACE, span_id=f"{n:016x}",
                      parent_id=None if parent is None else f"{parent:016x}", name=name,
                      start_ns=start or n * 1000, end_ns=end or n * 1000 + 500,
                      attributes={k.replace("__", "."): v for k, v in attributes.items()},
                      events=events, status_code=status)


def chat(n: int, parent: int | None, inputs: list[Any] | None, outputs: list[Any] | None,
         **extra: Any) -> SpanRecord:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                             "gen_ai.provider.name": "openai",
                             "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 10}
    if inputs is not None:
        attrs["gen_ai.input.messages"] = json.dumps(inputs)
    if outputs is not None:
        attrs["gen_ai.output.messages"] = json.dumps(outputs)
    attrs.update({k.replace("__", "."): v for k, v in extra.items()})
    return SpanRecord(trace_id=TRACE, span_id=f"{n:016x}",
                      parent_id=None if parent is None else f"{parent:016x}",
                      name="chat gpt-4o", start_ns=n * 1000, end_ns=n * 1000 + 500,
                      attributes=attrs)


def text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


CALL = {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "lookup",
                                         "arguments": {"q": "x"}}], "finish_reason": "tool_calls"}
TOOLS = json.dumps([{"type": "function", "name": "lookup", "description": "",
                     "parameters": {"type": "object", "properties": {}}}])


def workflow() -> list[SpanRecord]:
    """A workflow span over two agents: a researcher that calls a tool (an execute_tool
    span) and a writer; plus an HTTP span inside a model call."""
    return [
        span(1, "workflow", **{"gen_ai.operation.name": "invoke_workflow"}),
        span(2, "invoke_agent researcher", 1, **{"gen_ai.operation.name": "invoke_agent",
                                                 "gen_ai.agent.name": "researcher"}),
        chat(3, 2, [text("user", "find x")], [CALL], gen_ai__tool__definitions=TOOLS),
        span(4, "POST", 3),
        span(5, "execute_tool lookup", 2, **{
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
            "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.arguments": '{"q": "x"}',
            "gen_ai.tool.call.result": "found"}),
        chat(6, 2, [text("user", "find x"), {"role": "assistant", "parts": CALL["parts"]},
                    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1",
                                                "response": "found"}]}],
             [{"role": "assistant", "parts": [{"type": "text", "content": "x is found"}]}],
             gen_ai__tool__definitions=TOOLS),
        span(7, "invoke_agent writer", 1, **{"gen_ai.operation.name": "invoke_agent",
                                             "gen_ai.agent.name": "writer"}),
        chat(8, 7, [text("system", "Be brief."), text("user", "write")],
             [{"role": "assistant", "parts": [{"type": "text", "content": "done"}]}]),
    ]


def mixed_capture(trace: str = TRACE) -> list[SpanRecord]:
    """An agent whose first turn was captured whole (replayable), whose tool span kept no
    result, and whose second turn was traced without content (both inspect-only)."""
    spans = [
        span(1, "invoke_agent researcher", **{"gen_ai.operation.name": "invoke_agent",
                                              "gen_ai.agent.name": "researcher"}),
        chat(2, 1, [text("user", "find x")], [CALL], gen_ai__tool__definitions=TOOLS),
        span(3, "execute_tool lookup", 1, **{
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
            "gen_ai.tool.call.id": "c1"}),
        chat(4, 1, None, None),
    ]
    return [dataclasses.replace(s, trace_id=trace) for s in spans]


def test_each_call_says_what_is_missing_and_how_to_capture_it() -> None:
    calls = map_trace(mixed_capture(), run_id="r").calls
    assert [(c["call"], c["replayable"], c["missing"], c.get("capture_hint")) for c in calls] == [
        ("researcher#1/turn:1", True, [], None),
        ("researcher#1/turn:1/tool:1", False, ["tool result"], genai.CAPTURE_HINT),
        ("researcher#1/turn:2", False, ["request messages", "reply"], genai.CAPTURE_HINT)]


def test_agents_under_a_workflow_are_nodes_and_the_workflow_labels_the_run() -> None:
    run = map_trace(workflow(), run_id="r")
    state = fold(run.events)
    assert state.status == RunStatus.COMPLETED and state.label == "workflow"
    assert [(e.node, e.status) for e in state.executions] == [
        ("researcher", "completed"), ("writer", "completed")]
    assert [c.call for c in state.calls] == [
        "researcher#1/turn:1", "researcher#1/turn:1/tool:1", "researcher#1/turn:2",
        "writer#1/turn:1"]
    assert state.memory == {"researcher": "x is found", "writer": "done"}
    assert [c["replayable"] for c in run.calls] == [True, True, True, True]
    assert run.calls[1]["span_id"] == f"{5:016x}" and run.calls[1]["result_from"] == "tool span"
    (returned,) = [e for e in run.events if isinstance(e, ToolReturned)]
    assert returned.result == "found"
    assert [n.id for n in run.graph.nodes] == ["researcher", "writer"]
    assert fold(run.events).calls[0].cost_usd == 0.00035  # gpt-4o: 100 in, 10 out


def test_the_older_per_message_span_events_are_read() -> None:
    legacy = span(2, "chat gpt-4o", 1, events=(
        SpanEvent(name="gen_ai.system.message", time_ns=0, attributes={"content": "Sys"}),
        SpanEvent(name="gen_ai.user.message", time_ns=0, attributes={"content": "Hi"}),
        SpanEvent(name="gen_ai.choice", time_ns=0, attributes={
            "index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Hello"}})),
        **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
           "gen_ai.system": "openai"})
    run = map_trace([span(1, "app"), legacy], run_id="r")
    asked = next(e for e in run.events if e.type == "agent.requested")
    assert asked.payload()["system_prompt"] == "Sys"
    assert asked.payload()["messages"] == [{"role": "user", "content": "Hi"}]
    assert fold(run.events).memory == {"app": "Hello"}
    assert run.calls[0]["replayable"] is True


def test_a_model_span_without_a_model_is_rejected_with_its_reason() -> None:
    spans = [span(1, "app"), span(2, "chat", 1, **{"gen_ai.operation.name": "chat"})]
    run = map_trace(spans, run_id="r")
    assert [(r.span_id, r.reason) for r in run.rejected] == [
        (f"{2:016x}", "a chat span without gen_ai.request.model")]
    assert fold(run.events).status == RunStatus.COMPLETED  # the app span is a step


def test_a_failed_model_span_is_a_failed_call_and_a_failed_root_fails_the_run() -> None:
    spans = [span(1, "app", status=2),
             dataclasses.replace(chat(2, 1, [text("user", "hi")], None), status_code=2)]
    run = map_trace(spans, run_id="r")
    assert [e.call for e in run.events if isinstance(e, CallFailed)] == [None]
    assert fold(run.events).status == RunStatus.FAILED


def test_a_tool_span_no_turn_asked_for_is_a_tool_call_without_a_key() -> None:
    spans = [span(1, "app"), span(2, "execute_tool x", 1, **{
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "x"})]
    run = map_trace(spans, run_id="r")
    (called,) = [e for e in run.events if isinstance(e, ToolCalled)]
    assert called.call is None and called.tool == "x"
    assert run.calls == [{"call": None, "node": "app#1", "kind": "tool",
                          "span_id": f"{2:016x}", "tool": "x", "replayable": False,
                          "missing": ["tool arguments", "tool result"],
                          "capture_hint": genai.CAPTURE_HINT}]


@settings(max_examples=30, deadline=None)
@given(order=st.permutations(range(8)), repeats=st.lists(st.integers(0, 7), max_size=4))
def test_mapping_is_deterministic_whatever_the_order_and_repeats(
        order: list[int], repeats: list[int]) -> None:
    spans = workflow()
    shuffled = [spans[i] for i in order] + [spans[i] for i in repeats]
    expected = map_trace(spans, run_id="r")
    again = map_trace(shuffled, run_id="r")
    assert [e.to_wire() for e in again.events] == [e.to_wire() for e in expected.events]
    assert again.graph.to_wire() == expected.graph.to_wire()


def test_calls_belong_to_their_agent_span_through_a_frameworks_chains() -> None:
    spans = [
        span(1, "agent", **{"openinference.span.kind": "AGENT", "agent.name": "planner"}),
        span(2, "RunnableSequence", 1, **{"openinference.span.kind": "CHAIN"}),
        span(3, "ChatOpenAI", 2, **{"openinference.span.kind": "LLM",
                                     "llm.model_name": "gpt-4o",
                                     "llm.input_messages.0.message.role": "user",
                                     "llm.input_messages.0.message.content": "plan",
                                     "llm.output_messages.0.message.role": "assistant",
                                     "llm.output_messages.0.message.content": "ok"}),
        span(4, "RunnableSequence", 1, **{"openinference.span.kind": "CHAIN"}),
        span(5, "ChatOpenAI", 4, **{"openinference.span.kind": "LLM",
                                     "llm.model_name": "gpt-4o"}),
    ]
    state = fold(map_trace(spans, run_id="r").events)
    assert [c.call for c in state.calls] == ["planner#1/turn:1", "planner#1/turn:2"]
    assert [x.node for x in state.executions] == ["planner"]


def test_plain_spans_become_steps_under_their_root() -> None:
    spans = [span(1, "job"), span(2, "fetch", 1), span(3, "parse", 1)]
    state = fold(map_trace(spans, run_id="r").events)
    assert [x.node for x in state.executions] == ["fetch", "parse"]
    assert state.label == "job" and state.status == RunStatus.COMPLETED


def test_a_model_call_inside_a_tool_belongs_to_the_tools_node() -> None:
    spans = [span(1, "agent", **{"gen_ai.operation.name": "invoke_agent",
                                 "gen_ai.agent.name": "a"}),
             span(2, "execute_tool t", 1, **{"gen_ai.operation.name": "execute_tool",
                                              "gen_ai.tool.name": "t"}),
             chat(3, 2, [text("user", "inner")], None)]
    state = fold(map_trace(spans, run_id="r").events)
    assert {x.node for x in state.executions} == {"a"}


def test_openinference_tool_choice_and_response_format_are_the_requests() -> None:
    invocation = {"model": "gpt-4o", "temperature": 0,
                  "tool_choice": {"type": "function", "function": {"name": "lookup"}},
                  "parallel_tool_calls": False,
                  "response_format": {"type": "json_schema", "json_schema": {
                      "name": "out", "schema": {"type": "object"}}}}
    spans = [span(1, "app"), span(2, "llm", 1, **{
        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o",
        "llm.invocation_parameters": json.dumps(invocation),
        "llm.tools.0.tool.json_schema": json.dumps(json.loads(TOOLS)[0]),
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "go",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "{}"})]
    asked = next(e for e in map_trace(spans, run_id="r").events if e.type == "agent.requested")
    payload = asked.payload()
    assert (payload["tool_choice"], payload["parallel_tool_calls"],
            payload["response_format"]) == ({"name": "lookup"}, False, {"type": "object"})
    assert payload["temperature"] == 0.0 and payload["tools"][0]["name"] == "lookup"


def test_a_tool_span_before_any_turn_is_recorded_before_it() -> None:
    spans = [span(1, "app"),
             span(2, "execute_tool warmup", 1, **{"gen_ai.operation.name": "execute_tool",
                                                  "gen_ai.tool.name": "warmup"}),
             chat(3, 1, [text("user", "go")],
                  [{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}])]
    types = [e.type for e in map_trace(spans, run_id="r").events]
    assert types.index("tool.called") < types.index("agent.requested")
