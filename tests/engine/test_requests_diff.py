"""What differs between a recorded request and the one made now (``prefix_diverged``)."""

from __future__ import annotations

from dataclasses import replace

from forklab.engine.actions import ToolCall
from forklab.engine.events import AgentRequested
from forklab.engine.providers import ChatRequest, ToolDefinition
from forklab.engine.redaction import Redactor
from forklab.engine.requests_diff import (
    as_recorded,
    described,
    excerpts,
    recorded_request,
    recorded_tool_call,
    request_difference,
    request_fields,
    tool_call_difference,
)
from forklab.engine.state import Execution

LOOKUP = ToolDefinition(name="lookup_order", description="Look up an order.",
                        parameters={"type": "object", "properties": {"id": {"type": "string"}}})
REFUND = ToolDefinition(name="refund", description="Refund an order.")
BASE = ChatRequest(provider="openai", model="gpt-4.1", system_prompt="Be brief.",
                   temperature=0.2, tools=(REFUND,),
                   messages=({"role": "user", "content": "Where is A-1001?"},
                             {"role": "assistant", "content": "Looking."},
                             {"role": "user", "content": "Please hurry, it is late."}))


def summaries(was: ChatRequest, now: ChatRequest) -> list[str]:
    return [d.summary for d in request_difference(request_fields(was), request_fields(now))]


def test_equal_requests_have_no_difference() -> None:
    assert summaries(BASE, replace(BASE)) == []


def test_settings_name_both_values() -> None:
    now = replace(BASE, model="gpt-4o", temperature=0.7)
    assert summaries(BASE, now) == ["model gpt-4.1 → gpt-4o", "temperature 0.2 → 0.7"]


def test_the_first_differing_message_is_named_with_its_role_and_both_excerpts() -> None:
    messages = list(BASE.messages)
    messages[2] = {"role": "user", "content": "Please hurry, it is very late."}
    [diff] = request_difference(request_fields(BASE),
                                request_fields(replace(BASE, messages=tuple(messages))))
    assert diff.part == "messages[2].content"
    assert diff.summary == ("message 3 (role user) content differs: recorded 'Please hurry, "
                            "it is late.' now 'Please hurry, it is very late.'")


def test_an_added_message_is_counted() -> None:
    now = replace(BASE, messages=(*BASE.messages, {"role": "user", "content": "Hello?"}))
    assert summaries(BASE, now) == ["messages: 3 recorded, 4 now"]


def test_a_changed_message_and_a_changed_count_are_both_said() -> None:
    now = replace(BASE, messages=({"role": "user", "content": "Where is A-1002?"},))
    assert summaries(BASE, now) == [
        "message 1 (role user) content differs: recorded 'Where is A-1001?' now "
        "'Where is A-1002?'", "messages: 3 recorded, 1 now"]


def test_tools_added_removed_and_changed_are_named() -> None:
    assert summaries(BASE, replace(BASE, tools=(REFUND, LOOKUP))) == [
        "tools differ: added lookup_order"]
    assert summaries(BASE, replace(BASE, tools=())) == ["tools differ: removed refund"]
    edited = replace(REFUND, description="Refund an order (money leaves).")
    assert summaries(BASE, replace(BASE, tools=(edited,))) == [
        "tools differ: refund's description changed"]


def test_tool_choice_and_params_are_compared() -> None:
    now = replace(BASE, tool_choice="required", params={"seed": 7})
    assert summaries(BASE, now) == ["tool_choice differs: recorded null now required",
                                    "seed is sent now, was not"]
    assert summaries(replace(BASE, params={"seed": 7}), replace(BASE, params={"seed": 8})) == [
        "seed 7 → 8"]


def test_a_long_text_is_shown_around_its_first_difference() -> None:
    a, b = excerpts("x" * 200 + "apple" + "y" * 200, "x" * 200 + "grape" + "y" * 200, width=30)
    assert a == "…" + "x" * 10 + "apple" + "y" * 15 + "…"
    assert b == "…" + "x" * 10 + "grape" + "y" * 15 + "…"


def test_a_message_lists_the_first_parts_and_counts_the_rest() -> None:
    now = replace(BASE, provider="anthropic", model="claude", temperature=1.0,
                  system_prompt="Be thorough.")
    text = described(request_difference(request_fields(BASE), request_fields(now)))
    assert text.startswith("provider openai → anthropic; model gpt-4.1 → claude; temperature")
    assert text.endswith("; and 1 more difference")


def test_tool_calls_name_the_tool_and_the_arguments() -> None:
    assert [d.summary for d in tool_call_difference("refund", {"id": "A-1"}, "lookup",
                                                    {"id": "A-1"})] == [
        "tool name refund vs lookup (recorded vs now)"]
    [diff] = tool_call_difference("refund", {"amount": 10, "id": "A-1"}, "refund",
                                  {"amount": 99, "id": "A-1"})
    assert diff.summary == ('arguments differ: {"amount":10,"id":"A-1"} vs '
                            '{"amount":99,"id":"A-1"} (recorded vs now)')


def test_the_recorded_request_is_found_in_the_first_log_holding_it() -> None:
    fields = request_fields(BASE)
    event = AgentRequested(run_id="r", seq=3, node="support", occurrence=1, role=None,
                           index=None, call="openai:1", request_hash=BASE.request_hash,
                           **{k: v for k, v in fields.items() if k != "tools"},
                           tools=fields["tools"])
    elsewhere = replace(event, occurrence=2)
    assert recorded_request([[elsewhere], [event]], "support", 1, BASE.request_hash) is not None
    assert recorded_request([[elsewhere]], "support", 1, BASE.request_hash) is None
    found = recorded_request([[event]], "support", 1, BASE.request_hash)
    assert found is not None and request_difference(found, fields) == []


def test_both_sides_are_compared_redacted() -> None:
    secret = replace(BASE, messages=(
        {"role": "user", "content": "key sk-abcdefghijklmnopqrstuvwx1234"},))
    redactor = Redactor()
    was = as_recorded(secret, redactor)
    assert "sk-" not in str(was["messages"])
    assert request_difference(was, as_recorded(secret, redactor)) == []


def test_the_recorded_tool_call_of_a_key() -> None:
    call = ToolCall(seq=4, args_hash="h", args={"id": "A-1"}, tool="refund", call="tool:refund#1")
    execution = Execution(node="support", kind="workflow", occurrence=1, iteration=0,
                          start_seq=1, fingerprint="f", reads={}, started_at=0.0,
                          actions=[call])
    assert recorded_tool_call(execution, "tool:refund#1") is call
    assert recorded_tool_call(execution, "tool:refund#2") is None
    assert recorded_tool_call(None, "tool:refund#1") is None
