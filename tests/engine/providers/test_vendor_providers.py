"""forklab's ``openai`` and ``anthropic`` providers against the vendor stub: a whole tool
round trip, and how tools, tool_choice, parallel calls, structured output and the
conversation are translated into each vendor's dialect (the stub refuses, with the API's
400, any shape the real API would refuse)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from forklab.engine.environment import Environment
from forklab.engine.graph import parse_graph
from forklab.engine.providers import (
    AnthropicProvider,
    ChatRequest,
    OpenAICompatibleProvider,
    Provider,
    ProviderRegistry,
)
from forklab.engine.recording import run_recorded
from tests.engine.providers.conftest import Sleeps
from tests.engine.providers.conversation import (
    LOOKUP,
    ORDER_SCHEMA,
    REFUND,
    RESULT,
    SYSTEM,
    USER,
    answered,
    request,
)
from tests.vendor_stub import VendorStub

VENDORS = ["openai", "anthropic"]


def provider(stub: VendorStub, vendor: str, sleeps: Sleeps | None = None,
             **options: Any) -> Provider:
    options = {"timeout_s": 5, "sleep": sleeps if sleeps is not None else Sleeps(),
               **options}
    if vendor == "openai":
        return OpenAICompatibleProvider(base_url=stub.openai_base_url, api_key="sk-test",
                                        **options)
    return AnthropicProvider(base_url=stub.anthropic_base_url, api_key="ak-test", **options)


# -- a round trip ------------------------------------------------------------------------------


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_tool_round_trip_asks_for_the_tool_then_answers_from_its_result(
        stub: VendorStub, vendor: str) -> None:
    model = provider(stub, vendor)
    first_request = request(vendor)
    first = model.complete(first_request)
    [call] = first.tool_calls
    assert (call.name, call.arguments) == ("lookup_order", {"order_id": "A-17"})
    assert (first.text, first.finish_reason) == ("", "tool_calls")
    second = model.complete(answered(first_request, first))
    assert (second.text, second.finish_reason) == (f"Results: lookup_order={RESULT}", "stop")
    assert second.tool_calls == ()
    assert second.input_tokens > first.input_tokens > 0 and second.output_tokens > 0
    assert [a.status for a in second.attempts] == [200]


@pytest.mark.parametrize("vendor", VENDORS)
def test_parallel_calls_come_back_together_and_one_at_a_time_when_turned_off(
        stub: VendorStub, vendor: str) -> None:
    model = provider(stub, vendor)
    asked = request(vendor, messages=({"role": "user", "content": "Refund A-17, 42.5 USD."},),
                    tools=(LOOKUP, REFUND))
    together = model.complete(asked)
    one = model.complete(request(vendor, messages=asked.messages, tools=(LOOKUP, REFUND),
                                 parallel_tool_calls=False))
    assert [(c.name, c.arguments) for c in together.tool_calls] == [
        ("lookup_order", {"order_id": "A-17"}), ("refund", {"order_id": "A-17", "amount": 42.5})]
    assert [c.name for c in one.tool_calls] == ["lookup_order"]
    second = model.complete(answered(asked, together))  # both results in one turn
    assert second.text == f"Results: lookup_order={RESULT}; refund={RESULT}"


@pytest.mark.parametrize("vendor", VENDORS)
def test_structured_output_comes_back_as_a_json_document_of_the_schema(
        stub: VendorStub, vendor: str) -> None:
    reply = provider(stub, vendor).complete(request(vendor, tools=(),
                                                    response_format=ORDER_SCHEMA))
    assert json.loads(reply.text) == {"order_id": "A-17", "status": "shipped"}


# -- the openai dialect ------------------------------------------------------------------------


@pytest.mark.parametrize(("choice", "sent"), [
    ("auto", "auto"), ("required", "required"), ("none", "none"),
    ({"name": "refund"}, {"type": "function", "function": {"name": "refund"}}),
])
def test_openai_tool_choice_is_sent_in_chat_completions_form(
        stub: VendorStub, choice: Any, sent: Any) -> None:
    provider(stub, "openai").complete(request("openai", tools=(LOOKUP, REFUND),
                                              tool_choice=choice))
    assert stub.last.body["tool_choice"] == sent
    assert stub.last.body["tools"][1] == {"type": "function", "function": {
        "name": "refund", "description": "Refund an order.", "parameters": REFUND.parameters}}


def test_openai_sends_no_tool_fields_without_tools(stub: VendorStub) -> None:
    provider(stub, "openai").complete(request("openai", tools=(), tool_choice="auto",
                                              parallel_tool_calls=False))
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(stub.last.body)


def test_openai_structured_output_is_a_named_json_schema_strict_when_the_schema_allows(
        stub: VendorStub) -> None:
    loose = {"type": "object", "properties": {"note": {"type": "string"}}}
    model = provider(stub, "openai")
    model.complete(request("openai", tools=(), response_format=ORDER_SCHEMA))
    model.complete(request("openai", tools=(), response_format=loose))
    strict, lenient = (b["response_format"] for b in stub.bodies("openai"))
    assert strict == {"type": "json_schema", "json_schema": {
        "name": "order_status", "schema": ORDER_SCHEMA, "strict": True}}
    assert lenient["json_schema"]["name"] == "response"
    assert lenient["json_schema"]["strict"] is False


def test_openai_keeps_raw_arguments_text_and_passes_params_through(stub: VendorStub) -> None:
    messages = ({"role": "user", "content": USER},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "name": "lookup_order", "arguments": "{not json"}]},
                {"role": "tool", "tool_call_id": "c1", "name": "lookup_order",
                 "content": "arguments are not JSON"})
    provider(stub, "openai", organization="org-7").complete(
        request("openai", messages=messages, params={"top_p": 0.5, "choices": ["a"]}))
    body = stub.last.body
    assert body["messages"][2]["tool_calls"][0]["function"]["arguments"] == "{not json"
    assert body["messages"][2]["content"] is None
    assert body["top_p"] == 0.5 and "choices" not in body
    assert stub.last.headers["openai-organization"] == "org-7"


# -- the anthropic dialect ---------------------------------------------------------------------


@pytest.mark.parametrize(("choice", "parallel", "sent"), [
    ("auto", None, {"type": "auto"}),
    ("required", None, {"type": "any"}),
    ("none", None, {"type": "none"}),
    ({"name": "refund"}, None, {"type": "tool", "name": "refund"}),
    ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    (None, None, None),
])
def test_anthropic_tool_choice_is_sent_in_messages_api_form(
        stub: VendorStub, choice: Any, parallel: bool | None, sent: Any) -> None:
    provider(stub, "anthropic").complete(request("anthropic", tools=(LOOKUP, REFUND),
                                                 tool_choice=choice,
                                                 parallel_tool_calls=parallel))
    assert stub.last.body.get("tool_choice") == sent
    assert stub.last.body["tools"][0] == {"name": "lookup_order",
                                          "description": "Look up an order by its id.",
                                          "input_schema": LOOKUP.parameters}


def test_anthropic_merges_tool_results_and_puts_system_messages_on_top(
        stub: VendorStub) -> None:
    messages = (
        {"role": "system", "content": "Answer in English."},
        {"role": "user", "content": USER},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "t1", "name": "lookup_order", "arguments": {"order_id": "A-17"}},
            {"id": "t2", "name": "refund", "arguments": {"order_id": "A-17", "amount": 1}}]},
        {"role": "tool", "tool_call_id": "t1", "name": "lookup_order", "content": RESULT},
        {"role": "tool", "tool_call_id": "t2", "name": "refund", "content": "no such tool",
         "is_error": True},
        {"role": "user", "content": "Thanks."},
    )
    reply = provider(stub, "anthropic").complete(request("anthropic", messages=messages,
                                                         tools=(LOOKUP, REFUND)))
    body = stub.last.body
    assert body["system"] == f"{SYSTEM}\n\nAnswer in English."
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "t1", "name": "lookup_order", "input": {"order_id": "A-17"}},
        {"type": "tool_use", "id": "t2", "name": "refund",
         "input": {"order_id": "A-17", "amount": 1}}]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": RESULT},
        {"type": "tool_result", "tool_use_id": "t2", "content": "no such tool",
         "is_error": True},
        {"type": "text", "text": "Thanks."}]
    assert body["max_tokens"] == 200
    assert stub.last.headers["x-api-key"] == "ak-test"
    assert stub.last.headers["anthropic-version"] == "2023-06-01"
    assert reply.finish_reason in ("stop", "tool_calls")


def test_anthropic_structured_output_is_the_output_config_format(stub: VendorStub) -> None:
    provider(stub, "anthropic").complete(request("anthropic", response_format=ORDER_SCHEMA))
    assert stub.last.body["output_config"] == {
        "format": {"type": "json_schema", "schema": ORDER_SCHEMA}}


@pytest.mark.parametrize(("stop", "normalized"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("tool_use", "tool_calls"),
    ("max_tokens", "length"), ("refusal", "content_filter"), ("pause_turn", "pause_turn"),
])
def test_anthropic_stop_reasons_are_normalized(stub: VendorStub, stop: str,
                                               normalized: str) -> None:
    stub.canned({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                 "content": [{"type": "text", "text": "Partial"},
                             {"type": "text", "text": " answer"}],
                 "stop_reason": stop, "usage": {"input_tokens": 9, "output_tokens": 4}})
    reply = provider(stub, "anthropic").complete(request("anthropic"))
    assert (reply.text, reply.finish_reason) == ("Partial answer", normalized)
    assert (reply.input_tokens, reply.output_tokens) == (9, 4)


def test_anthropic_base_url_may_end_in_v1(stub: VendorStub) -> None:
    model = AnthropicProvider(base_url=f"{stub.anthropic_base_url}/v1/", api_key="k")
    model.complete(request("anthropic"))
    assert stub.last.path == "/v1/messages"


def test_a_request_the_api_would_refuse_is_a_provider_error_with_its_message(
        stub: VendorStub) -> None:
    starts_with_assistant: ChatRequest = request(
        "anthropic", messages=({"role": "assistant", "content": "Hello"},))
    with pytest.raises(Exception) as info:
        provider(stub, "anthropic").complete(starts_with_assistant)
    assert getattr(info.value, "code", None) == "provider_error"
    assert info.value.context["status"] == 400  # type: ignore[attr-defined]
    assert info.value.context["provider_message"] == (  # type: ignore[attr-defined]
        'invalid_request_error: messages: first message must use the "user" role')
    assert len(stub.requests) == 1  # a 400 is never retried


# -- in a run ----------------------------------------------------------------------------------


def graph(provider_name: str, model: str) -> Any:
    return parse_graph({
        "id": f"{provider_name}-e2e", "start": "ask",
        "nodes": [{"id": "ask", "kind": "agent",
                   "agent": {"provider": provider_name, "model": model,
                             "system_prompt": "Be brief.", "temperature": 0.2,
                             "max_tokens": 32},
                   "reads": ["question"], "writes": ["answer"], "prompt": "{question}"}],
    })


def test_a_run_on_the_anthropic_provider_records_its_answer_and_cost(stub: VendorStub) -> None:
    env = Environment(providers=ProviderRegistry({"anthropic": provider(stub, "anthropic")}))
    recorded = run_recorded(graph("anthropic", "claude-haiku-4-5"),
                            {"question": "Capital of France?"}, env=env)
    assert recorded.memory["answer"] == "You said: Capital of France?"
    [responded] = [e for e in recorded.event_log if e.type == "agent.responded"]
    assert responded.cost_usd == pytest.approx(
        (responded.input_tokens * 1.0 + responded.output_tokens * 5.0) / 1_000_000)


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_provider_timeout_fails_the_node_with_its_code(stub: VendorStub, vendor: str) -> None:
    stub.stall(30, times=2)
    model = provider(stub, vendor, timeout_s=0.2, max_retries=1)
    env = Environment(providers=ProviderRegistry({vendor: model}))
    recorded = run_recorded(graph(vendor, "m"), {"question": "Capital?"}, env=env)
    assert recorded.state.status == "failed"
    failed = recorded.event_log[-2]
    assert failed.type == "node.failed"
    assert failed.error["type"] == "provider_timeout"
    assert "0.2 s" in failed.error["message"]
