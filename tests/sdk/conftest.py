"""The code-first tests: the demo agents' official clients point at the vendor stub."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.scenarios import tools as world
from tests.vendor_stub import VendorStub
from tests.vendor_stub.fixtures import server, stub

__all__ = ["clients", "env", "server", "stub"]


@pytest.fixture
def clients(stub: VendorStub, monkeypatch: pytest.MonkeyPatch) -> Iterator[VendorStub]:
    """``openai.OpenAI()`` and ``anthropic.Anthropic()`` reach the stub, as a team's would
    reach the vendor: through their own environment variables. The world's effects reset."""
    monkeypatch.setenv("OPENAI_BASE_URL", stub.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", stub.anthropic_base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ak-user")
    monkeypatch.setenv("OPENAI_MAX_RETRIES", "0")
    world.WORLD.effects.clear()
    yield stub


@pytest.fixture
def env() -> Environment:
    return Environment(clock=FixedClock(), ids=counter_ids())
