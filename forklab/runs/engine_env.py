"""The one place the engine's Environment is built from Django settings.

Every fork accept builds one (its planning), so what is immutable and costs CPU to build is
made once per process and set of settings: the redactor (its key names split into words,
~1 ms of CPU under the profiler, ~5 % of an accept). A ``Redactor`` is frozen; its only
mutable part is a per-key-name answer cache, written by single dict stores.
"""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings
from django.utils.module_loading import import_string

from forklab.engine.environment import Environment
from forklab.engine.providers import (
    AnthropicProvider,
    OpenAICompatibleProvider,
    PriceTable,
    ProviderRegistry,
)
from forklab.engine.redaction import Redactor
from forklab.engine.tools import DEFAULT_TOOL_PREFIXES, ToolRegistry
from forklab.engine.workflows import DEFAULT_WORKFLOW_PREFIXES, WorkflowRegistry

OPENAI_API = "https://api.openai.com/v1"
ANTHROPIC_API = "https://api.anthropic.com"


def build_environment() -> Environment:
    """Providers (scripted always; openai when FORKLAB_OPENAI_BASE_URL or _API_KEY is set,
    anthropic when FORKLAB_ANTHROPIC_BASE_URL or _API_KEY is set — a key alone means the
    vendor's own API; each of FORKLAB_PROVIDERS, registered under its ``name``), the price
    table extended by FORKLAB_PRICES, tools allowed under FORKLAB_TOOL_MODULES, and the
    redactor with FORKLAB_REDACT_KEYS added to its secret key names; workflows allowed under
    FORKLAB_WORKFLOW_MODULES."""
    providers = ProviderRegistry()
    if settings.FORKLAB_OPENAI_BASE_URL or settings.FORKLAB_OPENAI_API_KEY:
        providers.register(OpenAICompatibleProvider(
            base_url=settings.FORKLAB_OPENAI_BASE_URL or OPENAI_API,
            api_key=settings.FORKLAB_OPENAI_API_KEY or None,
            organization=settings.FORKLAB_OPENAI_ORGANIZATION or None,
            timeout_s=float(settings.FORKLAB_OPENAI_TIMEOUT_S),
            max_retries=int(settings.FORKLAB_OPENAI_MAX_RETRIES),
        ))
    if settings.FORKLAB_ANTHROPIC_BASE_URL or settings.FORKLAB_ANTHROPIC_API_KEY:
        providers.register(AnthropicProvider(
            base_url=settings.FORKLAB_ANTHROPIC_BASE_URL or ANTHROPIC_API,
            api_key=settings.FORKLAB_ANTHROPIC_API_KEY or None,
            timeout_s=float(settings.FORKLAB_ANTHROPIC_TIMEOUT_S),
            max_retries=int(settings.FORKLAB_ANTHROPIC_MAX_RETRIES),
        ))
    for path in settings.FORKLAB_PROVIDERS:  # custom providers (may replace "scripted")
        providers.register(import_string(path)())
    # "acme.tools" allows acme.tools.send, never acme.toolsmith.*
    extra = [p if p.endswith(".") else f"{p}." for p in settings.FORKLAB_TOOL_MODULES]
    prefixes = [*DEFAULT_TOOL_PREFIXES, *extra]
    workflows = [*DEFAULT_WORKFLOW_PREFIXES,
                 *(p if p.endswith(".") else f"{p}." for p in settings.FORKLAB_WORKFLOW_MODULES)]
    return Environment(
        providers=providers,
        prices=PriceTable(settings.FORKLAB_PRICES),
        tools=ToolRegistry(dict.fromkeys(prefixes)),
        redactor=_redactor(tuple(settings.FORKLAB_REDACT_KEYS)),
        workflows=WorkflowRegistry(dict.fromkeys(workflows)),
    )


@lru_cache(maxsize=8)
def _redactor(extra_keys: tuple[str, ...]) -> Redactor:
    """The default redactor with ``extra_keys`` added (one per process and key set)."""
    return Redactor().with_keys(extra_keys)
