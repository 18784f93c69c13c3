"""The runtime environment a run executes in: providers, prices, tools, clock, ids and the
redactor applied to what action records keep (``forklab.engine.redaction``).

Everything non-deterministic (the clock, id generation) is injected here so replays and
tests are deterministic.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from forklab.engine.providers import PriceTable, ProviderRegistry
from forklab.engine.redaction import Redactor
from forklab.engine.tools import ReflectionStore, ToolRegistry


def uuid_ids() -> str:
    return uuid.uuid4().hex


def counter_ids(prefix: str = "run") -> Callable[[], str]:
    """Deterministic ids ``run-0001``, ``run-0002``, … for tests and golden logs."""
    counter = itertools.count(1)
    return lambda: f"{prefix}-{next(counter):04d}"


class FixedClock:
    """A clock that advances by ``step`` seconds per reading (deterministic timestamps)."""

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
