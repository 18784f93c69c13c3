"""The scripted provider with tools and structured output: deterministic calls whose
arguments come from the conversation, answers from the results, loops that end, JSON
documents valid against the schema — all pure functions of the request."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forklab.engine.providers import ChatRequest, ChatResponse, ScriptedProvider, ToolDefinition
from forklab.engine.providers.scripted_tools import MAX_TOOL_TURNS
from tests.engine.providers.conversation import LOOKUP, ORDER_SCHEMA, REFUND

SEARCH = ToolDefinition(name="search", description="Search the help center.",
                        parameters={"type": "object", "properties": {"query": {"type": "string"}},
                                    "required": ["query"]})
RESULTS = {"lookup_order": {"order_id": "A-17", "status": "delivered", "amount": 42.5},
           "refund": {"refund_id": "R-9", "status": "refunded"},
           "search": {"articles": 3}}


def request(user: str = "Please refund order A-17, it arrived broken.",
            **changes: Any) -> ChatRequest:
    fields: dict[str, Any] = {
        "provider": "scripted", "model": "scripted-small",
        "system_prompt": "You are the support agent for Acme.", "temperature": 0.2,
        "messages": ({"role": "user", "content": user},), "tools": (LOOKUP, REFUND)}
    return ChatRequest(**{**fields, **changes})


def complete(req: ChatRequest) -> ChatResponse:
    return ScriptedProvider(sleep=lambda _: None).complete(req)


def with_results(req: ChatRequest, reply: ChatResponse,
                 results: dict[str, Any] | None = None) -> ChatRequest:
    answers = tuple({"role": "tool", "tool_call_id": c.id, "name": c.name,
                     "content": json.dumps((RESULTS if results is None else results).get(c.name, {}))}
                    for c in reply.tool_calls)
    return dataclasses.replace(req, messages=(*req.messages, reply.to_message(), *answers))


def loop(req: ChatRequest, results: dict[str, Any] | None = None,
         max_turns: int = 20) -> tuple[list[ChatResponse], ChatRequest]:
    """A tiny tool loop: ask, run the tools (canned results), until a text answer."""
    replies = []
    for _ in range(max_turns):
        reply = complete(req)
        replies.append(reply)
        if not reply.tool_calls:
            return replies, req
        req = with_results(req, reply, results)
    raise AssertionError(f"no answer after {max_turns} turns")


def calls(reply: ChatResponse) -> list[tuple[str, Any]]:
    return [(c.name, c.arguments) for c in reply.tool_calls]


# -- asking for tools ------------------------------------------------------------------------


def test_the_first_turn_calls_the_tool_the_users_words_fill() -> None:
    reply = complete(request())
    assert calls(reply) == [("lookup_order", {"order_id": "A-17"})]  # refund lacks an amount
    assert (reply.text, reply.finish_reason) == ("", "tool_calls")
    assert reply.tool_calls[0].id.startswith("call_")
    assert reply.output_tokens > 0 and reply.input_tokens > 0


def test_a_later_turn_fills_arguments_from_the_tool_results() -> None:
    first = complete(request())
    second = complete(with_results(request(), first))
    assert calls(second) == [("refund", {"order_id": "A-17", "amount": 42.5})]


def test_tool_calls_are_deterministic_and_their_ids_follow_the_request() -> None:
    assert complete(request()) == complete(request())
    other = complete(request("Please refund order B-2, it arrived broken."))
    assert other.tool_calls[0].id != complete(request()).tool_calls[0].id
    assert calls(other) == [("lookup_order", {"order_id": "B-2"})]


@pytest.mark.parametrize(("user", "arguments"), [
    ("order_id: Z-9 please", {"order_id": "Z-9"}),
    ("lookup order_id=#4411", {"order_id": "#4411"}),
    ('{"order_id": "J-1", "note": "json from the user"}', {"order_id": "J-1"}),
    ("where is ORD778?", {"order_id": "ORD778"}),
])
def test_arguments_come_from_key_values_json_or_id_tokens_in_the_users_text(
        user: str, arguments: dict[str, Any]) -> None:
    assert calls(complete(request(user, tools=(LOOKUP,)))) == [("lookup_order", arguments)]


def test_a_single_required_string_takes_the_users_text() -> None:
    reply = complete(request("How do I reset my password?", tools=(SEARCH,)))
    assert calls(reply) == [("search", {"query": "How do I reset my password?"})]


def test_a_number_parameter_is_read_as_a_number_and_must_fit_its_type() -> None:
    refund_now = request("Refund A-17, amount: 12.5", tools=(REFUND,))
    no_number = request("Refund A-17, amount: lots", tools=(REFUND,))
    assert calls(complete(refund_now)) == [("refund", {"order_id": "A-17", "amount": 12.5})]
    assert complete(no_number).tool_calls == ()


def test_every_callable_tool_is_asked_for_at_once_unless_parallel_calls_are_off() -> None:
    user = "Refund A-17, amount: 5"
    assert [n for n, _ in calls(complete(request(user)))] == ["lookup_order", "refund"]
    single = complete(request(user, parallel_tool_calls=False))
    assert [n for n, _ in calls(single)] == ["lookup_order"]


def test_tool_choice_none_or_no_tools_asks_for_nothing() -> None:
    assert complete(request(tool_choice="none")).tool_calls == ()
    assert complete(request(tools=())).tool_calls == ()


def test_a_named_tool_choice_forces_that_tool_with_placeholders_for_what_is_missing() -> None:
    reply = complete(request(tool_choice={"name": "refund"}))
    assert calls(reply) == [("refund", {"order_id": "A-17", "amount": 0})]


def test_required_forces_a_call_when_nothing_is_callable() -> None:
    vague = request("Hello!", tools=(LOOKUP,))
    assert complete(vague).tool_calls == ()
    forced = complete(dataclasses.replace(vague, tool_choice="required"))
    assert calls(forced) == [("lookup_order", {"order_id": ""})]


# -- answering --------------------------------------------------------------------------------


def test_the_answer_quotes_the_results_of_the_calls() -> None:
    replies, _ = loop(request())
    answer = replies[-1]
    assert [calls(r) for r in replies[:-1]] == [
        [("lookup_order", {"order_id": "A-17"})],
        [("refund", {"order_id": "A-17", "amount": 42.5})]]
    assert answer.finish_reason == "stop" and answer.tool_calls == ()
    assert "lookup_order: order id A-17, status delivered, amount 42.5." in answer.text
    assert "refund: refund id R-9, status refunded." in answer.text


def test_a_failed_call_is_reported_as_failed() -> None:
    first = complete(request(tools=(LOOKUP,)))
    failed = dataclasses.replace(request(tools=(LOOKUP,)), messages=(
        *request().messages, first.to_message(),
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "name": "lookup_order",
         "content": "unknown order", "is_error": True}))
    assert "lookup_order failed: unknown order." in complete(failed).text


def test_a_loop_never_repeats_a_call_with_the_same_arguments() -> None:
    replies, _ = loop(request("Refund A-17, amount: 5"))
    made = [(c.name, json.dumps(c.arguments, sort_keys=True)) for r in replies
            for c in r.tool_calls]
    assert len(made) == len(set(made))
    assert replies[-1].text


def test_a_loop_stops_asking_after_the_tool_turn_limit() -> None:
    counter = ToolDefinition(name="next_page", parameters={
        "type": "object", "properties": {"page": {"type": "integer"}}, "required": ["page"]})
    pages = iter(range(2, 100))

    class Pages(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            return {"page": next(pages)}

    replies, _ = loop(request("page: 1", tools=(counter,)), results=Pages())
    assert len(replies) == MAX_TOOL_TURNS + 1
    assert replies[-1].tool_calls == ()


# -- structured output ------------------------------------------------------------------------


def test_structured_output_is_valid_against_the_schema_and_uses_the_conversation() -> None:
    reply = complete(request("Where is order A-17?", tools=(), response_format=ORDER_SCHEMA))
    data = json.loads(reply.text)
    assert data["order_id"] == "A-17"
    assert data["status"] in ("shipped", "pending")
    assert set(data) == {"order_id", "status"}


SCHEMA_NODES = st.recursive(
    st.one_of(
        st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number",
                                                        "boolean"])}),
        st.fixed_dictionaries({"enum": st.lists(st.text(max_size=5), min_size=1, max_size=4,
                                                unique=True)}),
        st.fixed_dictionaries({"type": st.just("integer"), "minimum": st.integers(-50, 50),
                               "maximum": st.integers(51, 200)}),
    ),
    lambda inner: st.one_of(
        st.fixed_dictionaries({"type": st.just("array"), "items": inner}),
        st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), inner, min_size=1,
                        max_size=4).map(lambda props: {"type": "object", "properties": props,
                                                       "required": sorted(props)}),
    ),
    max_leaves=8,
)


@settings(max_examples=120, deadline=None)
@given(schema=SCHEMA_NODES, user=st.text(max_size=60))
def test_any_schema_gets_a_document_valid_against_it(schema: dict[str, Any],
                                                     user: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    req = request(user, tools=(), response_format=schema)
    reply = complete(req)
    jsonschema.validate(json.loads(reply.text), schema)
    assert reply == complete(req)


# -- purity -----------------------------------------------------------------------------------


def test_changing_the_tools_changes_the_hash_and_the_answer() -> None:
    plain = request("Tell me about tides.", tools=())
    offered = request("Tell me about tides.", tools=(SEARCH,), tool_choice="none")
    described = request("Tell me about tides.", tools=(dataclasses.replace(
        SEARCH, description="Search everything."),), tool_choice="none")
    hashes = {r.request_hash for r in (plain, offered, described)}
    assert len(hashes) == 3
    assert len({complete(r).text for r in (plain, offered, described)}) == 3


NAMES = st.from_regex(r"[a-z]{1,6}(_id)?", fullmatch=True)
TYPES = st.sampled_from(["string", "number", "integer", "boolean"])
TOOLS = st.lists(
    st.builds(lambda name, props, required: ToolDefinition(
        name=name, parameters={"type": "object",
                               "properties": {p: {"type": t} for p, t in props.items()},
                               "required": [p for p in props if p in required]}),
        NAMES, st.dictionaries(NAMES, TYPES, max_size=3), st.sets(NAMES)),
    max_size=3, unique_by=lambda t: t.name).map(tuple)
VALUES = st.one_of(st.text(max_size=12), st.integers(-5, 500), st.floats(-1, 100),
                   st.booleans())
MESSAGES = st.lists(st.one_of(
    st.builds(lambda t: {"role": "user", "content": t},
              st.one_of(st.text(max_size=40),
                        st.dictionaries(NAMES, VALUES, max_size=3).map(json.dumps))),
    st.builds(lambda d: {"role": "tool", "tool_call_id": "x", "name": "t",
                         "content": json.dumps(d)}, st.dictionaries(NAMES, VALUES,
                                                                    max_size=3)),
), min_size=1, max_size=4).map(tuple)


@settings(max_examples=150, deadline=None)
@given(tools=TOOLS, messages=MESSAGES,
       choice=st.sampled_from([None, "auto", "required", "none"]),
       parallel=st.sampled_from([None, True, False]))
def test_any_tools_and_conversation_give_a_pure_function_of_the_request(
        tools: tuple[ToolDefinition, ...], messages: tuple[dict[str, Any], ...],
        choice: str | None, parallel: bool | None) -> None:
    req = request(tools=tools, messages=messages, tool_choice=choice,
                  parallel_tool_calls=parallel)
    first, again = complete(req), complete(dataclasses.replace(req))
    assert first == again
    assert bool(first.tool_calls) != bool(first.text)  # a call or an answer, never empty
    offered = {t.name: t for t in tools}
    for call in first.tool_calls:
        required = offered[call.name].parameters["required"]
        assert set(required) <= set(call.arguments)
    if parallel is False:
        assert len(first.tool_calls) <= 1


@settings(max_examples=60, deadline=None)
@given(tools=TOOLS, messages=MESSAGES)
def test_any_loop_over_generated_tools_ends_without_repeating_a_call(
        tools: tuple[ToolDefinition, ...], messages: tuple[dict[str, Any], ...]) -> None:
    replies, _ = loop(request(tools=tools, messages=messages), results={})
    made = [(c.name, json.dumps(c.arguments, sort_keys=True)) for r in replies
            for c in r.tool_calls]
    assert len(made) == len(set(made))
    assert replies[-1].text
