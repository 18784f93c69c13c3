"""The engine's garbage-collector sections (forklab.engine.collector): a paused section
leaves the collector as it found it, and a run's node loop never pauses it (cyclic garbage
made while a run runs is collected as usual)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from forklab.engine import Environment, parse_graph, run_recorded
from forklab.engine.collector import collector_paused


class _Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_sections_restore_a_disabled_collector() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


def _chain(n: int) -> dict[str, Any]:
    nodes = [{"id": f"s{i}", "kind": "tool", "tool": "gc.step", "reads": ["task"],
              "writes": [f"s{i}"]} for i in range(n)]
    edges = [{"from": f"s{i}", "to": f"s{i + 1}"} for i in range(n - 1)]
    return {"id": "gc-chain", "start": "s0", "nodes": nodes, "edges": edges}


def test_a_run_collects_its_cyclic_garbage_while_it_runs(collector_on: None) -> None:
    refs: list[weakref.ref[_Cycle]] = []
    during: list[int] = []
    env = Environment()

    def step(args: dict[str, Any], ctx: Any) -> str:
        garbage = _Cycle()
        refs.append(weakref.ref(garbage))
        during.append(sum(ref() is None for ref in refs))
        return "ok"

    env.tools.register("gc.step", step)
    recorded = run_recorded(parse_graph(_chain(600)), {"task": "t"}, env=env)
    assert recorded.state.status == "completed"
    assert gc.isenabled()
    # cycles made early in the run were found before it ended
    assert during[-1] > 0


def test_the_one_fingerprint_parts_pass_runs_with_the_collector_paused(
        collector_on: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass that writes every node's fingerprint parts is bounded by the graph and its
    texts live as long as the graph: it pauses the collector, which is on again after."""
    from forklab.engine import graph as graph_module

    during: list[bool] = []
    bulk = graph_module._bulk_fingerprint_parts

    def spy(graph: Any) -> Any:
        during.append(gc.isenabled())
        return bulk(graph)

    monkeypatch.setattr(graph_module, "_bulk_fingerprint_parts", spy)
    monkeypatch.setattr(graph_module, "PER_NODE_FIRST", 1)
    graph = parse_graph(_chain(4))
    for node in graph.nodes:
        graph.fingerprint_parts(node.id)
    assert during == [False]
    assert gc.isenabled()
