"""Model providers and the registry the runner resolves them from."""

from __future__ import annotations

from collections.abc import Mapping

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


class ProviderRegistry:
    """Providers by name; ``scripted`` is always present (the offline default)."""

    def __init__(self, providers: Mapping[str, Provider] | None = None) -> None:
        self._providers: dict[str, Provider] = {"scripted": ScriptedProvider()}
        self._providers.update(providers or {})

    def get(self, name: str) -> Provider:
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
]
