"""The scripted provider, the price table and the provider registry."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.errors import UnknownProviderError
from forklab.engine.graph import parse_graph
from forklab.engine.providers import (
    ChatRequest,
    ChatResponse,
    Price,
    PriceTable,
    ProviderRegistry,
    ScriptedProvider,
)
from forklab.engine.recording import run_recorded


class FakeSleep:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def request(**changes: Any) -> ChatRequest:
    base: dict[str, Any] = {
        "provider": "scripted", "model": "scripted-small", "system_prompt": "Be brief.",
        "temperature": 0.2, "messages": ({"role": "user", "content": "Explain tides."},),
    }
    return ChatRequest(**{**base, **changes})


def complete(req: ChatRequest) -> ChatResponse:
    return ScriptedProvider(sleep=FakeSleep()).complete(req)


# -- scripted provider -----------------------------------------------------------------------


def test_the_same_request_gets_the_same_text_from_separate_providers() -> None:
    first, second = complete(request()), complete(request())

    assert first == second
    assert first.text and first.text.endswith(".")


def test_the_answer_does_not_depend_on_the_simulated_latency() -> None:
    assert complete(request(latency_ms=0)).text == complete(request(latency_ms=40)).text


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": text}),
    min_size=1, max_size=3,
).map(tuple)
FIELDS = {
    "provider": st.sampled_from(["scripted", "openai", "other"]),
    "model": st.sampled_from(["scripted-small", "scripted-large", "gpt-4o", "x"]),
    "system_prompt": text,
    "temperature": st.floats(0, 2, allow_nan=False).map(lambda t: round(t, 3)),
    "messages": messages,
}


@settings(max_examples=150, deadline=None)
@given(data=st.data(), field=st.sampled_from(sorted(FIELDS)))
def test_changing_any_one_identity_field_changes_the_text(data: st.DataObject, field: str) -> None:
    base = request(**{name: data.draw(strategy, label=name) for name, strategy in FIELDS.items()})
    new_value = data.draw(FIELDS[field], label=f"new {field}")
    assume(new_value != getattr(base, field))
    changed = dataclasses.replace(base, **{field: new_value})

    assert complete(changed).text != complete(base).text


def test_token_counts_are_positive_and_grow_with_the_input() -> None:
    short = complete(request(messages=({"role": "user", "content": "Hi"},)))
    long = complete(request(messages=({"role": "user", "content": "Explain tides. " * 50},)))
    longer_system = complete(request(system_prompt="Be brief. " * 40,
                                     messages=({"role": "user", "content": "Hi"},)))

    assert short.input_tokens > 0 and short.output_tokens > 0
    assert long.input_tokens > short.input_tokens
    assert longer_system.input_tokens > short.input_tokens
    assert long.output_tokens == pytest.approx(len(long.text) / 4, abs=1)


def test_more_messages_cost_more_input_tokens_even_when_empty() -> None:
    one = complete(request(messages=({"role": "user", "content": ""},)))
    two = complete(request(messages=({"role": "user", "content": ""},) * 2))
    assert two.input_tokens > one.input_tokens


@pytest.mark.parametrize("seed", range(12))
def test_with_choices_the_answer_is_one_of_the_choices(seed: int) -> None:
    choices = ["approved", "changes_requested", "rejected"]
    req = request(system_prompt=f"judge {seed}", params={"choices": choices})

    assert complete(req).text in choices


def test_choices_spread_over_all_options_across_requests() -> None:
    answers = {complete(request(system_prompt=f"judge {i}", params={"choices": ["a", "b"]})).text
               for i in range(40)}
    assert answers == {"a", "b"}


def test_simulated_latency_uses_the_injected_sleep_and_is_reported() -> None:
    sleep = FakeSleep()

    response = ScriptedProvider(sleep=sleep).complete(request(latency_ms=250))

    assert sleep.calls == [0.25]
    assert response.latency_ms == 250


def test_no_latency_means_no_sleep() -> None:
    sleep = FakeSleep()
    ScriptedProvider(sleep=sleep).complete(request())
    assert sleep.calls == []


# -- prices ----------------------------------------------------------------------------------


def test_cost_is_tokens_times_price_per_million() -> None:
    prices = PriceTable()

    assert prices.cost("scripted-small", 1_000_000, 1_000_000) == pytest.approx(0.50 + 1.50)
    assert prices.cost("scripted-large", 2_000, 500) == pytest.approx(
        2_000 * 3.00 / 1e6 + 500 * 15.00 / 1e6)
    assert prices.cost("scripted-small", 0, 0) == 0.0


def test_an_unpriced_model_costs_none_not_zero() -> None:
    prices = PriceTable()

    assert prices.cost("my-local-model", 1_000, 1_000) is None
    assert not prices.is_priced("my-local-model")
    assert prices.price("my-local-model") is None


def test_a_free_model_costs_zero_not_none() -> None:
    assert PriceTable().cost("llama3.1:8b", 1_000, 1_000) == 0.0


def test_extra_prices_add_models_and_override_defaults() -> None:
    prices = PriceTable({
        "scripted-small": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
        "my-local-model": Price(0.25, 0.75),
    })

    assert prices.cost("scripted-small", 1_000_000, 1_000_000) == pytest.approx(3.0)
    assert prices.cost("my-local-model", 4_000_000, 0) == pytest.approx(1.0)
    assert "my-local-model" in prices.models()
    assert PriceTable().cost("scripted-small", 1_000_000, 1_000_000) == pytest.approx(2.0)


def test_an_agent_on_an_unpriced_model_records_a_none_cost_and_counts_it() -> None:
    spec = parse_graph({"id": "g", "start": "a", "nodes": [
        {"id": "a", "kind": "agent", "agent": {"model": "my-local-model"}, "writes": ["x"]}]})

    recorded = run_recorded(spec, {}, env=Environment(clock=FixedClock(), ids=counter_ids()))

    responded = [e for e in recorded.event_log if e.type == "agent.responded"]
    assert responded[0].cost_usd is None
    assert recorded.state.unpriced_calls == 1 and recorded.state.cost_usd == 0.0


# -- registry --------------------------------------------------------------------------------


def test_an_unknown_provider_raises_unknown_provider_naming_the_configured_ones() -> None:
    registry = ProviderRegistry()

    with pytest.raises(UnknownProviderError) as info:
        registry.get("anthropic")

    assert info.value.code == "unknown_provider"
    assert "'anthropic'" in info.value.message and "scripted" in info.value.message
    assert info.value.to_dict()["provider"] == "anthropic"


def test_the_registry_always_has_scripted_and_takes_registered_providers() -> None:
    custom = ScriptedProvider(sleep=FakeSleep())
    registry = ProviderRegistry({"local": custom})
    registry.register(custom, name="other")

    assert registry.names() == ["local", "other", "scripted"]
    assert registry.get("local") is custom
    assert isinstance(registry.get("scripted"), ScriptedProvider)


def test_an_agent_naming_an_unknown_provider_fails_its_node_not_the_engine() -> None:
    spec = parse_graph({"id": "g", "start": "a", "nodes": [
        {"id": "a", "kind": "agent", "agent": {"provider": "nope"}, "writes": ["x"]}]})

    recorded = run_recorded(spec, {}, env=Environment(clock=FixedClock(), ids=counter_ids()))

    failed = [e for e in recorded.event_log if e.type == "node.failed"]
    assert recorded.state.status == "failed"
    assert failed[0].error["type"] == "unknown_provider"


# -- the scripted text follows its prompt ------------------------------------------------------


def answer(system_prompt: str, user: str = "Explain how vaccines work", **changes: Any) -> str:
    return complete(request(system_prompt=system_prompt,
                            messages=({"role": "user", "content": user},), **changes)).text


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 10), st.sampled_from(["three", "bullet", "x"]), text)
def test_n_bullet_points_come_back_as_n_bullets(count: int, noise: str, user: str) -> None:
    lines = answer(f"Rewrite as exactly {count} bullet points. {noise}", user).splitlines()
    assert len(lines) == count and all(line.startswith("- ") for line in lines)


@pytest.mark.parametrize(("prompt", "count"), [("Plan it in three short steps.", 3),
                                               ("Give 5 steps.", 5)])
def test_steps_come_back_numbered(prompt: str, count: int) -> None:
    lines = answer(prompt).splitlines()
    assert [line.split(".")[0] for line in lines] == [str(i) for i in range(1, count + 1)]


def test_research_notes_read_like_notes_about_the_topic() -> None:
    text = answer("You are a careful researcher. List the key facts with sources.")
    head, *facts = text.splitlines()
    assert head == "Notes on vaccines:" and 3 <= len(facts) <= 5
    assert all(f.startswith("- ") and "(source: " in f for f in facts)


def test_short_forms_are_short_and_json_is_json() -> None:
    import json

    assert len(answer("Say it in one word.").split()) == 1
    terse = answer("Be terse.")
    assert terse.count(".") == 1 and terse.endswith(".")
    assert len(answer("Write a haiku.").splitlines()) == 3
    parsed = json.loads(answer("Answer in JSON."))
    assert set(parsed) == {"summary", "points", "confidence"}


def test_the_system_prompt_wins_over_instructions_quoted_in_the_user_text() -> None:
    quoted = "Goal: explain vaccines\nNotes: - as bullet points\n- more notes\nWrite the piece."
    text = answer("You are a science writer. Write a clear, friendly explanation.", quoted)
    assert not text.startswith(("- ", "Notes on")) and text.endswith(".")


def test_a_prompt_change_changes_the_shape_not_only_the_words() -> None:
    base = answer("You are a science writer. Write a clear, friendly explanation.")
    bullets = answer("Rewrite as exactly three bullet points.")
    assert "\n" not in base and bullets.count("\n- ") == 2
    assert "vaccines" in base.lower() and "vaccines" in bullets.lower()
