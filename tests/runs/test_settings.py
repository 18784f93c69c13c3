"""Settings helpers refuse malformed environment values; the engine environment is built
from settings in one place."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from forklab import settings as forklab_settings
from forklab.engine.errors import ToolResolutionError
from forklab.engine.providers import AnthropicProvider, OpenAICompatibleProvider
from forklab.runs.engine_env import build_environment


@pytest.mark.parametrize(("helper", "value", "fragment"), [
    (lambda: forklab_settings.envbool("X", False), "maybe", "expected one of 1/0"),
    (lambda: forklab_settings.envint("X", 1), "ten", "expected an integer"),
    (lambda: forklab_settings.envint("X", 1, minimum=1), "0", ">= 1"),
    (lambda: forklab_settings.envjson("X", {}), "{nope", "not valid JSON"),
    (lambda: forklab_settings.envprices("X"), "[1]", "JSON object"),
    (lambda: forklab_settings.envprices("X"), '{"m": {"input_per_mtok": 1}}', "'m'"),
    (lambda: forklab_settings.envprices("X"),
     '{"m": {"input_per_mtok": -1, "output_per_mtok": 1}}', "negative"),
    (lambda: forklab_settings.envchoice("X", "INFO", ("INFO",)), "LOUD", "expected one of"),
    (lambda: forklab_settings.envmap("X"), "support", "NAME=VALUE"),
    (lambda: forklab_settings.envmap("X"), "a=x,a=y", "each name once"),
    (lambda: forklab_settings.envmap("X"), '{"a": 1}', "JSON object of non-empty strings"),
])
def test_a_malformed_environment_value_fails_loudly_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, helper: object, value: str, fragment: str,
) -> None:
    monkeypatch.setenv("X", value)
    with pytest.raises(ImproperlyConfigured) as info:
        helper()  # type: ignore[operator]
    assert str(info.value).startswith("X") and fragment in str(info.value)


def test_well_formed_values_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("B", "yes")
    monkeypatch.setenv("L", " a, b ,,c ")
    monkeypatch.setenv("P", '{"m": {"input_per_mtok": 1, "output_per_mtok": "2.5"}}')
    assert forklab_settings.envbool("B", False) is True
    assert forklab_settings.envlist("L") == ["a", "b", "c"]
    assert forklab_settings.envprices("P") == {"m": {"input_per_mtok": 1.0,
                                                     "output_per_mtok": 2.5}}
    monkeypatch.setenv("M", " support = acme.agents:support ,weather agent=triage")
    assert forklab_settings.envmap("M") == {"support": "acme.agents:support",
                                            "weather agent": "triage"}
    monkeypatch.setenv("M", '{"support": "acme.agents:support"}')
    assert forklab_settings.envmap("M") == {"support": "acme.agents:support"}


def test_a_postgres_url_gets_a_per_process_test_database() -> None:
    config = forklab_settings.database_from_url("postgres://u@db.example:5432/forklab")
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert config["NAME"] == "forklab" and config["TEST"]["NAME"].startswith("test_forklab_")


def test_a_sqlite_url_keeps_immediate_transactions() -> None:
    config = forklab_settings.database_from_url("sqlite:////tmp/x.sqlite3")
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


def test_the_default_environment_is_offline_with_the_default_prices() -> None:
    env = build_environment()
    assert env.providers.names() == ["scripted"]
    assert env.prices.is_priced("scripted-small") and not env.prices.is_priced("my-model")


@override_settings(
    FORKLAB_OPENAI_BASE_URL="http://127.0.0.1:9/v1", FORKLAB_OPENAI_API_KEY="k",
    FORKLAB_PRICES={"my-model": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}},
    FORKLAB_TOOL_MODULES=["acme.tools"],
)
def test_settings_register_openai_prices_and_tool_modules() -> None:
    env = build_environment()
    assert isinstance(env.providers.get("openai"), OpenAICompatibleProvider)
    assert env.prices.cost("my-model", 1_000_000, 1_000_000) == pytest.approx(3.0)
    assert "acme.tools." in env.tools.allowed_prefixes
    with pytest.raises(ToolResolutionError):
        env.tools.resolve("acme.toolsmith.steal")


@override_settings(
    FORKLAB_OPENAI_BASE_URL="", FORKLAB_OPENAI_API_KEY="sk-only",
    FORKLAB_OPENAI_ORGANIZATION="org-7", FORKLAB_OPENAI_MAX_RETRIES=5,
    FORKLAB_ANTHROPIC_BASE_URL="", FORKLAB_ANTHROPIC_API_KEY="ak",
    FORKLAB_ANTHROPIC_TIMEOUT_S=7.5, FORKLAB_ANTHROPIC_MAX_RETRIES=0,
)
def test_a_key_alone_registers_each_vendor_provider_on_its_own_api() -> None:
    env = build_environment()
    openai = env.providers.get("openai")
    anthropic = env.providers.get("anthropic")
    assert isinstance(openai, OpenAICompatibleProvider)
    assert isinstance(anthropic, AnthropicProvider)
    assert openai.base_url == "https://api.openai.com/v1"
    assert anthropic.base_url == "https://api.anthropic.com"
    assert (openai.max_retries, anthropic.max_retries, anthropic.timeout_s) == (5, 0, 7.5)
    assert openai.headers["OpenAI-Organization"] == "org-7"
    assert anthropic.headers["x-api-key"] == "ak"

