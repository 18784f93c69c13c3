"""The small world the fork tests share: deterministic recordings and call counters.

Every scenario is recorded with a fixed clock and counter ids (run ids ``run-0001``, …), and
an environment whose provider and tools count what they really execute, so a test can say
"no model or tool call happened" without trusting the labels the fork wrote.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.events import AnyEvent
from forklab.engine.graph import GraphSpec, ToolNode, parse_graph
from forklab.engine.providers import ChatRequest, ChatResponse, ProviderRegistry, ScriptedProvider
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.scenarios.tools import WORLD
from forklab.engine.store import MemoryStore, Store
from forklab.engine.tools import ToolContext
from tests.engine.golden_tool import scenario_hitl

NAMES = sorted(SCENARIOS)


class Counter:
    """Counts real provider and tool executions (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.model_calls: list[ChatRequest] = []
        self.tool_calls: list[str] = []

    def model(self, request: ChatRequest) -> None:
        with self._lock:
            self.model_calls.append(request)

    def tool(self, path: str) -> None:
        with self._lock:
            self.tool_calls.append(path)

    def reset(self) -> None:
        with self._lock:
            self.model_calls.clear()
            self.tool_calls.clear()


class CountingProvider:
    """The scripted provider, counting every completion it really computes."""

    name = "scripted"

    def __init__(self, counter: Counter) -> None:
        self.counter = counter
        self.inner = ScriptedProvider()

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.counter.model(request)
        return self.inner.complete(request)


def _counting_tool(path: str, counter: Counter) -> Callable[[dict[str, Any], ToolContext], Any]:
    module, _, attr = path.rpartition(".")
    fn = getattr(importlib.import_module(module), attr)

    def wrapped(args: dict[str, Any], ctx: ToolContext) -> Any:
        counter.tool(path)
        return fn(args, ctx)

    return wrapped


def make_env(counter: Counter | None = None, graph: GraphSpec | None = None) -> Environment:
    """Fixed clock, counter ids; with ``counter``, provider and ``graph``'s tools count calls."""
    env = Environment(clock=FixedClock(), ids=counter_ids("run"))
    if counter is not None:
        env.providers = ProviderRegistry({"scripted": CountingProvider(counter)})
        tools = {n.tool for n in (graph.nodes if graph else []) if isinstance(n, ToolNode)}
        for path in tools:
            env.tools.register(path, _counting_tool(path, counter))
    return env


def record(name: str, *, counter: Counter | None = None, store: Store | None = None,
           graph: GraphSpec | None = None, input: dict[str, Any] | None = None,
           hitl: Any = "scenario") -> RecordedRun:
    """Record scenario ``name`` (``order-fulfilment`` answered as its scenario says)."""
    scenario = SCENARIOS[name]
    graph = graph or scenario.graph()
    return run_recorded(
        graph, dict(scenario.input if input is None else input),
        env=make_env(counter, graph), store=store if store is not None else MemoryStore(),
        hitl=scenario_hitl(scenario) if hitl == "scenario" else hitl)


def graph_with(graph: GraphSpec, node_id: str, **fields: Any) -> GraphSpec:
    """A copy of ``graph`` with ``fields`` replaced on one node."""
    data = graph.to_wire()
    data["nodes"] = [{**n, **fields} if n["id"] == node_id else n for n in data["nodes"]]
    return parse_graph(data)


def world() -> dict[str, int]:
    """How many charges, emails and pages the simulated outside world has seen."""
    return {kind: WORLD.count(kind) for kind in ("charge", "email", "page")}


def labels(calls: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(c["node"], c["kind"], c["label"]) for c in calls]


def of_type(events: list[AnyEvent], type_: str) -> list[AnyEvent]:
    return [e for e in events if e.type == type_]
