"""The tool loop records every turn and tool call as its own keyed call (SPEC §6.1, §6.2).

Driven by a model that follows the conversation (``helpers.FollowingModel``): what it asks
for next depends on the tool results it was sent, so the loop is exercised for real.
"""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine.events import AgentRequested, AgentResponded, CallFailed, ToolCalled
from forklab.engine.graph import parse_graph
from forklab.engine.recording import run_recorded
from tests.engine.agents.helpers import (
    TICKET,
    FollowingModel,
    env_with,
    refunds,
    support_graph,
    tool_results,
)


def record(model: FollowingModel | None = None, input: dict[str, Any] | None = None,
           **agent_fields: Any) -> Any:
    model = model or FollowingModel()
    return run_recorded(support_graph(**agent_fields), dict(input or TICKET),
                        env=env_with(model))


def test_the_model_chooses_tools_and_answers_from_their_results() -> None:
    before = refunds()
    run = record()
    assert run.state.status == "completed"
    assert run.memory["answer"].startswith("Refunded 39.98 for A-1001 (refund R-")
    assert refunds() == before + 1
    keys = [c.call for c in run.state.calls]
    assert keys == ["assist#1/turn:1", "assist#1/turn:1/tool:1", "assist#1/turn:2",
                    "assist#1/turn:2/tool:1", "assist#1/turn:3", "close#1/turn:1"]
    assert [c.kind for c in run.state.calls] == ["agent", "tool", "agent", "tool", "agent",
                                                 "agent"]


def test_a_reply_asking_for_tools_is_recorded_with_them_and_their_provider_ids() -> None:
    run = record()
    first = next(e for e in run.event_log if isinstance(e, AgentResponded))
    assert first.text == ""
    assert first.tool_calls == [{"id": "call_1_1", "name": "lookup_order",
                                 "arguments": {"order_id": "A-1001"}}]
    assert first.finish_reason == "tool_calls"
    called = [e for e in run.event_log if isinstance(e, ToolCalled)]
    assert [(e.call, e.call_id, e.tool, e.effect) for e in called] == [
        ("turn:1/tool:1", "call_1_1", "lookup_order", "read"),
        ("turn:2/tool:1", "call_2_1", "issue_refund", "write")]


def test_each_turn_sends_the_whole_conversation_and_the_offered_tools() -> None:
    model = FollowingModel()
    record(model)
    first, second, third, closing = model.requests
    assert first.system_prompt == "You are the support agent for Acme Widgets."
    assert [m["role"] for m in first.messages] == ["user"]
    assert [m["role"] for m in second.messages] == ["user", "assistant", "tool"]
    assert [m["role"] for m in third.messages] == ["user", "assistant", "tool", "assistant",
                                                   "tool"]
    assert second.messages[2]["tool_call_id"] == "call_1_1"
    assert [t.name for t in first.tools] == ["lookup_order", "issue_refund", "search_policy"]
    assert first.tools[0].parameters == {
        "type": "object", "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"]}
    assert first.tools[0].description.startswith("Look up an order by its id")
    # the closing agent continues the same conversation through history
    assert [m["role"] for m in closing.messages] == [
        "user", "assistant", "tool", "assistant", "tool", "assistant", "user"]
    assert closing.tools == ()


def test_history_written_back_holds_the_node_turns_so_later_nodes_continue_the_talk() -> None:
    run = record()
    conversation = run.memory["conversation"]
    assert [m["role"] for m in conversation] == [
        "user", "assistant", "tool", "assistant", "tool", "assistant", "user", "assistant"]
    assert conversation[0] == {"role": "user", "content": TICKET["ticket"]}
    assert conversation[-1] == {"role": "assistant", "content": run.memory["closing"]}


def test_the_request_hash_covers_the_tools_offered() -> None:
    hashes = []
    for description in ("Look an order up.", "Find an order."):
        data = support_graph().to_wire()
        data["tools"]["lookup_order"]["description"] = description
        model = FollowingModel()
        run_recorded(parse_graph(data), dict(TICKET), env=env_with(model))
        hashes.append(model.requests[0].request_hash)
    assert hashes[0] != hashes[1]


def test_an_unknown_tool_goes_back_to_the_model_as_a_recorded_error_result() -> None:
    def script(request: Any) -> Any:
        if not tool_results(request):
            return "", [("delete_everything", {"really": True})]
        return f"Saw: {tool_results(request)[0][1]}", []

    run = record(FollowingModel(script=script))
    assert run.state.status == "completed"
    [failed] = [e for e in run.event_log if isinstance(e, CallFailed)]
    assert (failed.call, failed.error["type"]) == ("turn:1/tool:1", "unknown_tool")
    assert "delete_everything" in run.memory["answer"]
    assert "lookup_order" in run.memory["answer"]  # the error names the tools offered


def test_arguments_failing_the_schema_are_answered_as_an_error_never_run() -> None:
    before = refunds()

    def script(request: Any) -> Any:
        if not tool_results(request):
            return "", [("issue_refund", {"order_id": "A-1001"})]  # amount missing
        return f"Tool said: {tool_results(request)[0][1]}", []

    run = record(FollowingModel(script=script))
    assert refunds() == before
    [failed] = [e for e in run.event_log if isinstance(e, CallFailed)]
    assert failed.error["type"] == "invalid_arguments"
    assert "'amount' is a required property" in run.memory["answer"]


def test_a_tool_that_raises_is_answered_to_the_model_with_its_error() -> None:
    def script(request: Any) -> Any:
        if not tool_results(request):
            return "", [("lookup_order", {"order_id": 17})]  # wrong type: schema refuses
        return str(tool_results(request)), []

    run = record(FollowingModel(script=script))
    assert "is not of type 'string'" in run.memory["answer"]


def test_a_model_that_never_stops_calling_tools_fails_the_node_at_max_turns() -> None:
    def script(request: Any) -> Any:
        return "", [("search_policy", {"topic": f"refund {len(request.messages)}"})]

    model = FollowingModel(script=script)
    run = record(model, max_turns=3)
    assert run.state.status == "failed"
    assert run.state.error["type"] == "max_turns_exceeded"
    assert len(model.requests) == 3


def test_parallel_tool_calls_are_recorded_in_the_order_the_model_asked() -> None:
    run = record(FollowingModel(parallel=True))
    called = [e.call for e in run.event_log if isinstance(e, ToolCalled)]
    assert called[:2] == ["turn:1/tool:1", "turn:1/tool:2"]
    returned = [e.call for e in run.event_log if e.type == "tool.returned"]
    assert returned[:2] == ["turn:1/tool:1", "turn:1/tool:2"]


def test_an_untrusted_tool_taints_the_answer_and_the_conversation() -> None:
    data = support_graph().to_wire()
    data["tools"]["lookup_order"]["trusted"] = False
    run = run_recorded(parse_graph(data), dict(TICKET), env=env_with(FollowingModel()))
    assert {"answer", "conversation", "closing"} <= run.state.taint


def test_a_forced_tool_choice_binds_the_first_turn_only() -> None:
    model = FollowingModel()
    record(model, tool_choice={"name": "lookup_order"})
    assert model.requests[0].tool_choice == {"name": "lookup_order"}
    assert model.requests[1].tool_choice == "auto"


def test_structured_output_is_parsed_and_checked_against_the_response_format() -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}},
              "required": ["ok"]}
    good = record(FollowingModel(script=lambda r: ('{"ok": true}', [])),
                  response_format=schema)
    assert good.memory["answer"] == {"ok": True}
    bad = record(FollowingModel(script=lambda r: ('{"ok": "yes"}', [])),
                 response_format=schema)
    assert bad.state.error["type"] == "invalid_structured_output"


def test_the_first_turn_of_a_loop_is_logged_as_a_one_turn_node_would_be() -> None:
    """Keys are not stored for a role instance's first turn: logs written before keys and
    one-turn nodes read the same, and the fold derives ``turn:1``."""
    run = record()
    requested = [e for e in run.event_log if isinstance(e, AgentRequested)]
    assert [e.call for e in requested] == [None, "turn:2", "turn:3", None]


@pytest.mark.parametrize("history", [{"not": "a list"}, ["hello"], [{"role": "robot"}]])
def test_a_history_key_holding_no_conversation_fails_the_node_clearly(history: Any) -> None:
    run = record(input={**TICKET, "conversation": history})
    assert run.state.error["type"] == "invalid_history"
    assert "conversation" in run.state.error["message"]
