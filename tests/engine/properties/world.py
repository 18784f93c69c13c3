"""The small world the property suite runs in: deterministic tools, a countable outside
world, counting providers and a deterministic human.

Everything here is a pure function of its inputs (tool args, ``ctx.occurrence``, a request),
so two executions that observe the same thing do the same thing: the precondition for
"memoize is invisible" and "a null fork reproduces its base". Every real execution is
counted where it happens (the provider, the tool body), so "no call happened" is measured,
never read back from the labels a fork wrote.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.canonical import canonical_json
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.oracle import HumanAnswer
from forklab.engine.providers import (
    ChatRequest,
    ChatResponse,
    Price,
    PriceTable,
    ProviderRegistry,
    ScriptedProvider,
)
from forklab.engine.tools import ReflectionStore, ToolContext

WORDS = ("red", "green", "blue", "yes", "no")
"""What tools answer: a small vocabulary, so router rules (``eq``) really branch."""

PRICED_MODELS = ("scripted-small", "scripted-mini", "scripted-large")
UNPRICED_MODEL = "scripted-unpriced"
"""Answered by the scripted provider but absent from the price table: an unpriced model."""

READ_TOOL = "props.lookup"
WRITE_TOOL = "props.send"
FLAKY_TOOL = "props.flaky"
REFLECT_TOOL = "props.reflect"
TOOLS = (READ_TOOL, WRITE_TOOL, FLAKY_TOOL, REFLECT_TOOL)


def digest(*parts: Any) -> int:
    """A stable integer of any JSON-able parts."""
    return int(hashlib.sha256(canonical_json(list(parts)).encode()).hexdigest()[:12], 16)


def word(*parts: Any) -> str:
    return WORDS[digest(*parts) % len(WORDS)]


class Counter:
    """Counts what really executes: model completions and tool bodies (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.model_calls: list[ChatRequest] = []
        self.tool_calls: list[tuple[str, str]] = []  # (tool, node)

    def model(self, request: ChatRequest) -> None:
        with self._lock:
            self.model_calls.append(request)

    def tool(self, path: str, node: str) -> None:
        with self._lock:
            self.tool_calls.append((path, node))

    @property
    def total(self) -> int:
        with self._lock:
            return len(self.model_calls) + len(self.tool_calls)

    def reset(self) -> None:
        with self._lock:
            self.model_calls.clear()
            self.tool_calls.clear()


@dataclass
class OutsideWorld:
    """What the write tool did outside the run: one entry per real ``props.send``."""

    sent: list[dict[str, Any]] = field(default_factory=list)


class CountingProvider:
    """The scripted provider, counting every completion it really computes."""

    name = "scripted"

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self.inner = ScriptedProvider()

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.counter.model(request)
        return self.inner.complete(request)


def _outputs(args: dict[str, Any], value: Any) -> Any:
    """A tool's result: one value per key the node asked for in ``params.out``."""
    keys = args.get("out") or []
    if len(keys) == 1:
        return value
    return {key: f"{value}-{i}" for i, key in enumerate(keys)}


def _inputs(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k != "out"}


def make_env(counter: Counter, world: OutsideWorld) -> Environment:
    """Fixed clock, counter ids, the counting scripted provider and the four test tools."""
    prices = PriceTable()
    env = Environment(clock=FixedClock(), ids=counter_ids("run"), prices=prices,
                      providers=ProviderRegistry({"scripted": CountingProvider(counter)}))

    def lookup(args: dict[str, Any], ctx: ToolContext) -> Any:
        counter.tool(READ_TOOL, ctx.node)
        return _outputs(args, word(_inputs(args), ctx.occurrence))

    def send(args: dict[str, Any], ctx: ToolContext) -> Any:
        counter.tool(WRITE_TOOL, ctx.node)
        world.sent.append({"node": ctx.node, "args": _inputs(args)})
        return _outputs(args, "sent-" + word(_inputs(args), ctx.occurrence))

    def flaky(args: dict[str, Any], ctx: ToolContext) -> Any:
        counter.tool(FLAKY_TOOL, ctx.node)
        if digest(_inputs(args), "flaky") % 3 == 0:
            raise TimeoutError(f"upstream timed out for {canonical_json(_inputs(args))[:40]}")
        return _outputs(args, word(_inputs(args), ctx.occurrence, "flaky"))

    def reflect(args: dict[str, Any], ctx: ToolContext) -> Any:
        counter.tool(REFLECT_TOOL, ctx.node)
        ctx.reflect("lessons", f"{ctx.node}#{ctx.occurrence}", canonical_json(_inputs(args)))
        return _outputs(args, word(_inputs(args), "reflect"))

    for path, fn in ((READ_TOOL, lookup), (WRITE_TOOL, send), (FLAKY_TOOL, flaky),
                     (REFLECT_TOOL, reflect)):
        env.tools.register(path, fn)
    assert not prices.is_priced(UNPRICED_MODEL) and all(map(prices.is_priced, PRICED_MODELS))
    return env


def hitl(request: dict[str, Any]) -> HumanAnswer:
    """A deterministic human: the decision is a function of the gate and what it shows."""
    choice = digest(request["node"], request.get("context")) % 6
    decision = "rejected" if choice == 0 else "edited" if choice == 1 else "approved"
    return HumanAnswer(decision=decision, data={"note": word(request.get("context"))},
                       answered_by="props")


class CountingReflections(ReflectionStore):
    """The cross-run store, counting every write that really reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, store: str, key: str, value: Any) -> None:
        self.writes += 1
        super().write(store, key, value)


@dataclass
class Harness:
    """One example's world: env, counter, outside world (fresh per example)."""

    counter: Counter = field(default_factory=Counter)
    world: OutsideWorld = field(default_factory=OutsideWorld)
    reflections: CountingReflections = field(default_factory=CountingReflections)
    env: Environment = field(init=False)

    def __post_init__(self) -> None:
        self.env = make_env(self.counter, self.world)
        self.env.reflections = self.reflections


__all__ = ["PRICED_MODELS", "UNPRICED_MODEL", "Counter", "Harness", "OutsideWorld", "Price",
           "TOOLS", "digest", "hitl", "make_env", "word"]
