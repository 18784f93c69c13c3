"""An imported run re-read as a workflow's recording (SPEC §8 (b)), in the engine alone: the
conversion of an imported run's calls, matching on what a trace captured, the refusals —
and a fork of the recording re-executing the real code with the trace answering it."""

from __future__ import annotations

from typing import Any

import pytest

from forklab.demo_agents import support as demo
from forklab.engine import fork
from forklab.engine.captured import (
    INSPECT_ONLY,
    captured_hash,
    check_prefix_servable,
    differing_parts,
    projection,
    request_matches,
)
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.errors import CallNotReplayable, WorkflowInputMissing
from forklab.engine.events import AgentRequested, MemoryWritten, ToolCalled, ToolReturned
from forklab.engine.providers import ChatRequest
from forklab.engine.reducers import fold
from forklab.engine.store import MemoryStore
from forklab.engine.traces import decode_protobuf, map_trace, read_otlp_json
from forklab.engine.traces.as_workflow import as_workflow, step_io, workflow_input
from forklab.engine.workflows import declared_tools, workflow_graph
from tests.traces.spans import traced_workflow
from tests.vendor_stub import VendorStub

TICKET = "Order A-1001 arrived damaged, please refund 39.98"
SUPPORT = "forklab.demo_agents.support:support"


@pytest.fixture
def app_env(stub: VendorStub, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo code's client reaches the stub inside forklab too (its own env vars)."""
    monkeypatch.setenv("OPENAI_BASE_URL", stub.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-app")


def _recording(stub: VendorStub, env: Environment) -> tuple[Any, MemoryStore]:
    request = traced_workflow(stub, demo.support, {"ticket": TICKET}, name="support")
    spans, _ = read_otlp_json(decode_protobuf(request.SerializeToString()))
    imported = map_trace(spans, run_id="imported")
    graph = workflow_graph(env.workflows, SUPPORT)
    store = MemoryStore()
    io = step_io(spans, {"support"})
    recording = as_workflow(imported.events, graph=graph, graph_version=store.save_graph(graph),
                            run_id="wf", input=io.input, output=io,
                            tool_effects=declared_tools(demo.support))
    store.append("wf", recording.events, expected_seq=0)
    stub.reset()
    return recording, store


def test_an_imported_runs_calls_become_the_workflows_calls_in_span_order(
        stub: VendorStub) -> None:
    env = Environment(clock=FixedClock(), ids=counter_ids())
    recording, _ = _recording(stub, env)
    state = fold(recording.events)
    assert state.status == "completed" and state.input == {"ticket": TICKET,
                                                           "model": "gpt-4.1-mini"}
    assert [c.call for c in state.calls] == [
        "support#1/openai:1", "support#1/tool:lookup_order#1", "support#1/tool:issue_refund#1",
        "support#1/openai:2"]
    assert [(e.tool, e.effect) for e in recording.events if isinstance(e, ToolCalled)] == [
        ("lookup_order", "read"), ("issue_refund", "write")]  # as the code declares them
    returned = [e.result for e in recording.events if isinstance(e, ToolReturned)]
    assert returned[0]["found"] is True  # the tool message's JSON, as the tool returned it
    asked = [e for e in recording.events if isinstance(e, AgentRequested)]
    assert all(a.request_hash.startswith("captured:") for a in asked)
    assert "tools=" in asked[0].request_hash and "temperature" not in asked[0].request_hash
    (output,) = [e for e in recording.events if isinstance(e, MemoryWritten)]
    assert output.key == "output" and output.value.startswith("Results: ")
    assert [c["imported_call"] for c in recording.calls][:2] == [
        "support#1/turn:1", "support#1/turn:1/tool:1"]


def test_a_fork_of_the_recording_reexecutes_the_code_with_the_trace_answering(
        stub: VendorStub, app_env: None) -> None:
    env = Environment(clock=FixedClock(), ids=counter_ids())
    _, store = _recording(stub, env)
    null = fork("wf", at={"before_call": "support#1/openai:2"}, policy={"memoize": True},
                store=store, env=env)
    assert null.state is not None and null.state.status == "completed"
    assert stub.requests == []
    assert null.state.memory == fold(store.read("wf")).memory
    live = fork("wf", at={"before_call": "support#1/openai:2"}, store=store, env=env)
    assert [c["label"] for c in live.calls] == ["reused", "reused", "reused", "live"]
    assert len(stub.requests) == 1  # the tail's one call


def _request(**fields: Any) -> ChatRequest:
    base: dict[str, Any] = {"provider": "openai", "model": "gpt-4.1-mini",
                            "system_prompt": "Be kind.", "temperature": 1.0,
                            "messages": ({"role": "user", "content": "hi"},)}
    return ChatRequest(**{**base, **fields})


def test_a_captured_call_matches_on_the_parts_the_trace_captured_only() -> None:
    recorded = captured_hash(projection(_request(), ["model", "system", "messages"]))
    # what the trace did not capture (max tokens, other params, temperature) is not compared
    assert request_matches(recorded, _request(max_tokens=99, params={"seed": 1},
                                              temperature=0.3))
    assert request_matches(recorded, _request(model="gpt-4.1-mini-2025-04-14"))  # a snapshot
    changed = _request(messages=({"role": "user", "content": "hello"},))
    assert differing_parts(recorded, changed) == ["messages"]
    assert differing_parts(recorded, _request(system_prompt="Be terse.", model="o3")) == [
        "model", "system"]
    # a tool message's name (the SDK adds it) and an assistant's null content are not parts
    asked = {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c", "name": "f", "arguments": '{"a": 1}'}]}
    seen = {"role": "assistant", "content": "",
            "tool_calls": [{"id": "c", "name": "f", "arguments": {"a": 1}}]}
    trace = captured_hash(projection(_request(messages=(seen, {
        "role": "tool", "tool_call_id": "c", "content": "ok"})), ["messages"]))
    assert request_matches(trace, _request(messages=(asked, {
        "role": "tool", "tool_call_id": "c", "name": "f", "content": "ok"})))


def test_an_inspect_only_call_matches_nothing_and_a_whole_hash_matches_as_before() -> None:
    assert not request_matches(INSPECT_ONLY, _request())
    assert differing_parts(INSPECT_ONLY, _request()) == ["content (not captured)"]
    assert request_matches(_request().request_hash, _request())
    assert not request_matches(_request().request_hash, _request(max_tokens=99))


@pytest.mark.parametrize(("captured", "supplied", "fragment"), [
    (None, None, "captured no input"),
    ({"question": "?"}, None, "holds keys ['question']"),
    ("Order A-1001", None, "not a JSON object"),
    (None, {"model": "x"}, "the fork request's input patch holds keys ['model']"),
])
def test_a_workflow_input_is_never_guessed(captured: Any, supplied: Any, fragment: str) -> None:
    with pytest.raises(WorkflowInputMissing) as info:
        workflow_input(captured, workflow="support", parameters=["ticket", "model"],
                       required=["ticket"], span="support", supplied=supplied)
    assert fragment in info.value.message and "input_patch" in info.value.message


def test_a_workflow_input_comes_from_the_span_else_from_the_request() -> None:
    kwargs: dict[str, Any] = {"workflow": "support", "parameters": ["ticket", "model"],
                              "required": ["ticket"], "span": "support"}
    assert workflow_input({"ticket": "t"}, **kwargs) == {"ticket": "t"}
    assert workflow_input(None, supplied={"ticket": "u"}, **kwargs) == {"ticket": "u"}


def test_a_prefix_holding_an_inspect_only_call_is_refused_naming_it(stub: VendorStub) -> None:
    env = Environment(clock=FixedClock(), ids=counter_ids())
    recording, _ = _recording(stub, env)
    calls = [dict(c) for c in recording.calls]
    calls[1].update(replayable=False, missing=["tool result"])
    events = [*recording.events]
    events[1] = type(events[1])(**{**{f: getattr(events[1], f) for f in (
        "run_id", "seq", "at", "trace_id", "spans", "rejected", "conversation")},
        "calls": calls})
    check_prefix_servable(events, node="support", occurrence=1,
                          before="support#1/tool:lookup_order#1")  # before it: fine
    with pytest.raises(CallNotReplayable) as info:
        check_prefix_servable(events, node="support", occurrence=1,
                              before="support#1/openai:2")
    assert info.value.context["call"] == "support#1/tool:lookup_order#1"
    assert "tool result not captured" in info.value.message
