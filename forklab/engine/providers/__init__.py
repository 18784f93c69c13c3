"""Model providers and the registry the runner resolves them from."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from forklab.engine.errors import UnknownProviderError
from forklab.engine.providers.anthropic import AnthropicProvider
from forklab.engine.providers.base import (
    Attempt,
    ChatRequest,
    ChatResponse,
    Message,
    Provider,
    ToolCallRequest,
    ToolDefinition,
)
from forklab.engine.providers.http import RetryPolicy
from forklab.engine.providers.openai import OpenAICompatibleProvider
from forklab.engine.providers.pricing import DEFAULT_PRICES, Price, PriceTable
from forklab.engine.providers.scripted import ScriptedProvider, estimate_tokens

_LENT: ContextVar[Mapping[str, Provider] | None] = ContextVar("forklab_lent_providers",
                                                              default=None)


@contextmanager
def lend_providers(providers: Mapping[str, Provider]) -> Iterator[None]:
    """Within this block (this thread or task, and what it starts with a copied context),
    every registry answers ``providers`` for their names ahead of its own.

    A code-first workflow's model call goes out through the vendor client the user built
    (their endpoint, credentials and transport): the SDK recorder lends that client as the
    call's provider for the duration of the call (``forklab.sdk``), so whichever oracle
    answers it live reaches the user's endpoint, while a change naming another provider
    still gets that one."""
    token = _LENT.set({**(_LENT.get() or {}), **providers})
    try:
        yield
    finally:
        _LENT.reset(token)


class ProviderRegistry:
    """Providers by name; ``scripted`` is always present (the offline default)."""

    def __init__(self, providers: Mapping[str, Provider] | None = None) -> None:
        self._providers: dict[str, Provider] = {"scripted": ScriptedProvider()}
        self._providers.update(providers or {})

    def get(self, name: str) -> Provider:
        lent = _LENT.get()
        if lent is not None and name in lent:
            return lent[name]
        try:
            return self._providers[name]
        except KeyError:
            raise UnknownProviderError(
                f"unknown provider {name!r}; configured: {', '.join(sorted(self._providers))}",
                provider=name,
            ) from None

    def register(self, provider: Provider, name: str | None = None) -> None:
        self._providers[name or provider.name] = provider

    def names(self) -> list[str]:
        return sorted(self._providers)


__all__ = [
    "DEFAULT_PRICES", "AnthropicProvider", "Attempt", "ChatRequest", "ChatResponse", "Message",
    "OpenAICompatibleProvider", "Price", "PriceTable", "Provider", "ProviderRegistry",
    "RetryPolicy", "ScriptedProvider", "ToolCallRequest", "ToolDefinition", "estimate_tokens",
    "lend_providers",
]
