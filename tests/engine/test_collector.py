"""The engine's garbage-collector sections (forklab.engine.collector): a paused section
leaves the collector as it found it, and a run's node loop never pauses it (cyclic garbage
made while a run runs is collected as usual)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from forklab.engine import Environment, collector, parse_graph, run_recorded
from forklab.engine.collector import collector_paused


class _Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()  # a test that failed while it held the collector off
    else:
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


def test_a_section_hands_what_it_built_to_the_oldest_generation(
        collector_on: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The survivors of a paused pass skip the young generations (no scan just to promote
    them), yet a cycle among them that becomes garbage is still found by a full collection."""
    # a process that imported the ASGI application (tests/ws) froze its heap: not this one
    monkeypatch.setattr(collector, "_heap_frozen", False)
    with collector_paused():
        kept = [_Cycle() for _ in range(100)]
        dropped = _Cycle()
    assert gc.isenabled()
    gc.disable()  # look before any young collection could promote them anyway
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(item) in oldest for item in kept)
    assert not any(id(o) == id(kept[0]) for o in gc.get_objects(generation=0))
    ref = weakref.ref(dropped)
    del dropped
    assert ref() is not None  # a cycle: refcounting cannot free it
    gc.enable()
    gc.collect()
    assert ref() is None


def test_a_frozen_heap_stays_frozen(collector_on: None) -> None:
    """A process that froze its heap (forklab.serving) keeps it out of the collector's
    reach: a section does not unfreeze it, and leaves what it built young."""
    before = _Cycle()
    collector.freeze_heap()
    try:
        with collector_paused():
            built = _Cycle()
        gc.disable()  # no young collection between the section and the look
        # Still frozen: the permanent generation is outside every generation get_objects
        # lists. (Not gc.get_freeze_count(): frozen objects freed by refcounting meanwhile,
        # e.g. by another thread, lower it without anything being unfrozen.)
        assert not any(o is before for o in gc.get_objects())
        assert not any(o is built for o in gc.get_objects(generation=2))
    finally:
        collector.thaw_heap()
        gc.enable()


def test_a_section_never_asks_how_much_is_frozen(collector_on: None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``gc.get_freeze_count()`` walks the whole frozen heap: a process that froze its
    start-up heap paid that walk at the end of every section (the test session ran ~15x
    slower). The section decides from what :func:`collector.freeze_heap` recorded."""
    def walk() -> int:
        raise AssertionError("gc.get_freeze_count walks the frozen heap")

    for frozen in (False, True):
        monkeypatch.setattr(collector, "_heap_frozen", frozen)
        monkeypatch.setattr(collector.gc, "get_freeze_count", walk)
        with collector_paused():
            _Cycle()
        assert gc.isenabled()
