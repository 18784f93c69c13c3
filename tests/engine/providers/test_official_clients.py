"""The vendor stub speaks the vendors' dialect: the official ``openai`` and ``anthropic``
clients get replies from it that parse, its 400s surface as their own BadRequestError with
the stub's message, and for one conversation forklab's providers send the server the same
body the official clients send."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from forklab.engine.providers import AnthropicProvider, OpenAICompatibleProvider
from tests.engine.providers.conversation import (
    ARGS_TEXT,
    CALL_ID,
    LOOKUP,
    ORDER_SCHEMA,
    REFUND,
    RESULT,
    SYSTEM,
    TURN_2,
    USER,
    request,
)
from tests.vendor_stub import VendorStub

OPENAI_TOOLS = [{"type": "function", "function": LOOKUP.to_wire()},
                {"type": "function", "function": REFUND.to_wire()}]
ANTHROPIC_TOOLS = [{"name": t.name, "description": t.description, "input_schema": t.parameters}
                   for t in (LOOKUP, REFUND)]


@pytest.fixture
def openai_client(stub: VendorStub) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test",
                       max_retries=0) as client:
        yield client


@pytest.fixture
def anthropic_client(stub: VendorStub) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="ak-test",
                             max_retries=0) as client:
        yield client


# -- the official clients against the stub -----------------------------------------------------


def test_the_official_openai_client_gets_a_tool_call_then_an_answer_quoting_the_result(
        stub: VendorStub, openai_client: openai.OpenAI) -> None:
    client = openai_client
    messages: list[Any] = [{"role": "system", "content": SYSTEM},
                           {"role": "user", "content": USER}]
    first = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                           tools=OPENAI_TOOLS[:1])
    [call] = first.choices[0].message.tool_calls or []
    assert first.choices[0].finish_reason == "tool_calls"
    assert (call.function.name, call.function.arguments) == ("lookup_order", ARGS_TEXT)
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": RESULT}]
    second = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                            tools=OPENAI_TOOLS[:1])
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == f"Results: lookup_order={RESULT}"
    assert second.usage is not None and second.usage.prompt_tokens > 0


def test_the_official_anthropic_client_gets_a_tool_use_then_an_answer_quoting_the_result(
        stub: VendorStub, anthropic_client: anthropic.Anthropic) -> None:
    client = anthropic_client
    messages: list[Any] = [{"role": "user", "content": USER}]
    first = client.messages.create(model="claude-sonnet-4-5", max_tokens=200, system=SYSTEM,
                                   messages=messages, tools=ANTHROPIC_TOOLS[:1])
    [use] = [b for b in first.content if b.type == "tool_use"]
    assert first.stop_reason == "tool_use"
    assert (use.name, use.input) == ("lookup_order", {"order_id": "A-17"})
    messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": RESULT}]}]
    second = client.messages.create(model="claude-sonnet-4-5", max_tokens=200, system=SYSTEM,
                                    messages=messages, tools=ANTHROPIC_TOOLS[:1])
    assert second.stop_reason == "end_turn"
    assert [b.type for b in second.content] == ["text"]
    assert second.content[0].text == f"Results: lookup_order={RESULT}"  # type: ignore[union-attr]


def test_a_tool_message_answering_no_call_is_the_openai_clients_bad_request(
        openai_client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.chat.completions.create(model="gpt-4o-mini", messages=[
            {"role": "user", "content": USER},
            {"role": "tool", "tool_call_id": "call_nowhere", "content": RESULT}])
    assert "must be a response to a preceeding message with 'tool_calls'" in str(info.value)


def test_a_tool_result_without_its_tool_use_is_the_anthropic_clients_bad_request(
        anthropic_client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        anthropic_client.messages.create(model="claude-sonnet-4-5", max_tokens=10,
                                               messages=[{"role": "user", "content": [
                                                   {"type": "tool_result",
                                                    "tool_use_id": "toolu_nowhere",
                                                    "content": RESULT}]}])
    assert "unexpected `tool_use_id`" in str(info.value)


def test_two_user_messages_in_a_row_are_the_anthropic_clients_bad_request(
        anthropic_client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        anthropic_client.messages.create(model="claude-sonnet-4-5", max_tokens=10,
                                               messages=[{"role": "user", "content": "a"},
                                                         {"role": "user", "content": "b"}])
    assert "roles must alternate" in str(info.value)


# -- forklab's bodies equal the official clients' -------------------------------------------


def test_forklab_openai_sends_the_body_the_official_client_sends(
        stub: VendorStub, openai_client: openai.OpenAI) -> None:
    openai_client.chat.completions.create(
        model="gpt-4o-mini", temperature=0.2, max_tokens=200,
        messages=[{"role": "system", "content": SYSTEM},
                  {"role": "user", "content": USER},
                  {"role": "assistant", "content": "Let me check.", "tool_calls": [
                      {"id": CALL_ID, "type": "function",
                       "function": {"name": "lookup_order", "arguments": ARGS_TEXT}}]},
                  {"role": "tool", "tool_call_id": CALL_ID, "content": RESULT},
                  {"role": "user", "content": "And refund it."}],
        tools=OPENAI_TOOLS, tool_choice={"type": "function", "function": {"name": "refund"}},
        parallel_tool_calls=False,
        response_format={"type": "json_schema", "json_schema": {
            "name": "order_status", "schema": ORDER_SCHEMA, "strict": True}})
    OpenAICompatibleProvider(base_url=stub.openai_base_url, api_key="sk-test").complete(
        request("openai", messages=TURN_2, tools=(LOOKUP, REFUND),
                tool_choice={"name": "refund"}, parallel_tool_calls=False,
                response_format=ORDER_SCHEMA))
    official, ours = stub.bodies("openai")
    assert ours == official


def _blocks(body: dict[str, Any]) -> dict[str, Any]:
    """The Messages API's short form (a string content) spelled as its one text block."""
    return {**body, "messages": [
        {**m, "content": [{"type": "text", "text": m["content"]}]
         if isinstance(m["content"], str) else m["content"]} for m in body["messages"]]}


def test_forklab_anthropic_sends_the_body_the_official_client_sends(
        stub: VendorStub, anthropic_client: anthropic.Anthropic) -> None:
    anthropic_client.messages.create(
        model="claude-sonnet-4-5", max_tokens=200, system=SYSTEM,
        extra_body={"temperature": 0.2},  # this SDK release has no temperature argument
        messages=[{"role": "user", "content": USER},
                  {"role": "assistant", "content": [
                      {"type": "text", "text": "Let me check."},
                      {"type": "tool_use", "id": CALL_ID, "name": "lookup_order",
                       "input": {"order_id": "A-17"}}]},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": CALL_ID, "content": RESULT},
                      {"type": "text", "text": "And refund it."}]}],
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "tool", "name": "refund", "disable_parallel_tool_use": True},
        output_config={"format": {"type": "json_schema", "schema": ORDER_SCHEMA}})
    AnthropicProvider(base_url=stub.anthropic_base_url, api_key="ak-test").complete(
        request("anthropic", messages=TURN_2, tools=(LOOKUP, REFUND),
                tool_choice={"name": "refund"}, parallel_tool_calls=False,
                response_format=ORDER_SCHEMA))
    official, ours = stub.bodies("anthropic")
    assert _blocks(ours) == _blocks(official)
