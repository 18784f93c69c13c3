"""The runtime environment a run executes in: providers, prices, tools, clock, ids and the
redactor applied to what action records keep (``forklab.engine.redaction``).

Everything non-deterministic (the clock, id generation) is injected here so replays and
tests are deterministic.

``max_concurrency`` is how many nodes of one run may execute at once when the graph does not
say (``GraphSpec.max_concurrency``); it defaults to ``FORKLAB_MAX_CONCURRENCY`` (else 16).
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from forklab.engine.errors import ConfigurationError
from forklab.engine.providers import PriceTable, ProviderRegistry
from forklab.engine.redaction import Redactor
from forklab.engine.tools import ReflectionStore, ToolRegistry
from forklab.engine.workflows import WorkflowRegistry


def uuid_ids() -> str:
    return uuid.uuid4().hex


def counter_ids(prefix: str = "run") -> Callable[[], str]:
    """Deterministic ids ``run-0001``, ``run-0002``, … for tests and golden logs."""
    counter = itertools.count(1)
    return lambda: f"{prefix}-{next(counter):04d}"


DEFAULT_MAX_CONCURRENCY = 16
MAX_CONCURRENCY_LIMIT = 256


def max_concurrency_from_env(environ: dict[str, str] | None = None) -> int:
    """``FORKLAB_MAX_CONCURRENCY`` (an integer from 1 to 256), else 16.

    Raises ``ConfigurationError`` naming the variable for anything else."""
    raw = (os.environ if environ is None else environ).get("FORKLAB_MAX_CONCURRENCY", "").strip()
    if not raw:
        return DEFAULT_MAX_CONCURRENCY
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_CONCURRENCY_LIMIT:
        raise ConfigurationError(
            f"FORKLAB_MAX_CONCURRENCY must be an integer from 1 to {MAX_CONCURRENCY_LIMIT} "
            f"(nodes of one run executing at once); got {raw!r}",
            variable="FORKLAB_MAX_CONCURRENCY")
    return value


class FixedClock:
    """A clock that advances by ``step`` seconds per reading (deterministic timestamps).

    It is *logical*: its readings count events rather than tell time, so the runner reads it
    only in log order (when an event is appended) — a run's stamps are then the same whatever
    its concurrency. A real clock is read when an event happens, so nodes that ran at once
    show their real overlap.
    """

    logical = True

    def __init__(self, start: float = 1_767_225_600.0, step: float = 0.001) -> None:
        self._now = start
        self._step = step

    def __call__(self) -> float:
        self._now += self._step
        return round(self._now, 6)


@dataclass
class Environment:
    providers: ProviderRegistry = field(default_factory=ProviderRegistry)
    prices: PriceTable = field(default_factory=PriceTable)
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    reflections: ReflectionStore = field(default_factory=ReflectionStore)
    clock: Callable[[], float] = time.time
    ids: Callable[[], str] = uuid_ids
    redactor: Redactor = field(default_factory=Redactor)  # applied to recorded requests/tools
    max_concurrency: int = field(default_factory=max_concurrency_from_env)
    workflows: WorkflowRegistry = field(default_factory=WorkflowRegistry)
