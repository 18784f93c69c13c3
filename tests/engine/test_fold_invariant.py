"""The invariant the engine rests on: folding a run's log gives the state the live runner had.

After every event of every scenario, ``fold(events[:i])`` must equal (canonically) a copy of
the runner's own state taken right after it applied event ``i``. The log is read back
through its wire form, as a durable store would return it, and the clock ticks in
sub-microsecond steps so precision lost on the way is caught too. A failure names the first
differing key, like zulip's ``verify_action``.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from forklab.engine.canonical import canonical_equals, canonical_json
from forklab.engine.environment import Environment, counter_ids
from forklab.engine.events import Event, from_wire
from forklab.engine.graph import GraphSpec
from forklab.engine.oracle import HumanAnswer
from forklab.engine.reducers import fold
from forklab.engine.runner import Runner
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.store import MemoryStore
from tests.engine.golden_tool import scenario_hitl


def first_difference(expected: Any, actual: Any, path: str = "state") -> str | None:
    """The path of the first canonical difference between two JSON values, or None."""
    if canonical_equals(expected, actual):
        return None
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual)):
            found = first_difference(expected.get(key), actual.get(key), f"{path}.{key}")
            if found:
                return found
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        for i, (a, b) in enumerate(zip(expected, actual, strict=True)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
    return (f"{path}: live runner has {canonical_json(expected)[:200]}, "
            f"fold has {canonical_json(actual)[:200]}")


def sub_microsecond_clock() -> Callable[[], float]:
    """Deterministic, but with digits below the microseconds the wire form keeps."""
    ticks = itertools.count(1)
    return lambda: 1_767_225_600.0 + next(ticks) * 0.000_123_456_7


def record_with_snapshots(
    name: str, hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None,
    graph: GraphSpec | None = None,
) -> tuple[Runner, MemoryStore, list[dict[str, Any]]]:
    """Run a scenario (under ``graph``, a variant of its own, if given), copying the live
    state's wire form after every event of the run."""
    scenario = SCENARIOS[name]
    store = MemoryStore()
    env = Environment(clock=sub_microsecond_clock(), ids=counter_ids("run"))
    snapshots: list[dict[str, Any]] = []
    runner: Runner | None = None

    def on_event(event: Event) -> None:
        assert runner is not None
        if event.run_id == runner.run_id:  # child runs share the hook
            snapshots.append(copy.deepcopy(runner.state.to_wire()))

    runner = Runner(graph or scenario.graph(), store=store, run_id="run-live", env=env, hitl=hitl,
                    on_event=on_event)
    # on_event sees events once stored; a batch of one stores each as soon as it is folded,
    # so the hook sees the live state right after every event (batching changes only when
    # events are stored, never what is folded — test_fold_at_every_flush records with real
    # batches)
    runner.batch_limit = 1
    runner.start(dict(scenario.input))
    return runner, store, snapshots


def assert_fold_matches_every_snapshot(
    store: MemoryStore, run_id: str, snapshots: list[dict[str, Any]]
) -> None:
    events = [from_wire(event.to_wire()) for event in store.read(run_id)]
    assert len(snapshots) == len(events), "the on_event hook missed events"
    for i, live in enumerate(snapshots, start=1):
        folded = fold(events[:i]).to_wire()
        problem = first_difference(live, folded)
        assert problem is None, (
            f"after event seq {i} ({events[i - 1].type}, node {events[i - 1].node!r}): "
            f"{problem}")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_fold_of_the_log_equals_the_live_state_after_every_event(name: str) -> None:
    runner, store, snapshots = record_with_snapshots(name, scenario_hitl(SCENARIOS[name]))

    assert runner.state.finished, f"{name} ended {runner.state.status}"
    assert_fold_matches_every_snapshot(store, runner.run_id, snapshots)


def test_fold_equals_the_live_state_across_a_pause_and_its_answer() -> None:
    graph = SCENARIOS["order-fulfilment"].graph()
    gate = graph.node("approve")  # declares the key its answer edits
    graph = graph.with_node(gate.model_copy(update={"writes": ["approval", "note"]}))
    runner, store, snapshots = record_with_snapshots("order-fulfilment", hitl=None, graph=graph)
    assert runner.state.status == "paused"

    paused_at = len(snapshots)
    runner.answer(HumanAnswer(decision="edited", memory_updates={"note": "gift wrap"}))

    assert runner.state.status == "completed"
    assert len(snapshots) > paused_at
    assert_fold_matches_every_snapshot(store, runner.run_id, snapshots)


def test_fold_mismatch_names_the_first_differing_key() -> None:
    live = {"memory": {"draft": "a", "notes": "n"}, "executions": [{"node": "x"}]}
    folded = {"memory": {"draft": "b", "notes": "n"}, "executions": [{"node": "y"}]}

    problem = first_difference(live, folded)

    assert problem is not None
    assert problem.startswith("state.executions[0].node: ")
    assert first_difference(live, copy.deepcopy(live)) is None
    assert first_difference({"a": 1, "b": None}, {"a": 1}) is None  # None means absent


def test_every_event_type_has_its_reducer_and_a_subclass_takes_its_bases() -> None:
    from dataclasses import dataclass

    from forklab.engine.events import EVENT_TYPES, MemoryWritten, RunStarted
    from forklab.engine.reducers import _HANDLERS, evolve
    from forklab.engine.state import RunState

    assert set(_HANDLERS) == set(EVENT_TYPES.values())

    @dataclass(frozen=True, slots=True)
    class Annotated(MemoryWritten):  # no engine event is subclassed; a caller's may be
        note: str = ""

    state = evolve(RunState(), RunStarted(run_id="r", seq=1, graph_id="g", graph_version=1,
                                          graph_hash="h", input={}, start="a"))
    evolve(state, Annotated(run_id="r", seq=2, key="k", value=1, note="x"))
    assert state.memory == {"k": 1} and state.version == 2  # applied outside a node
    with pytest.raises(TypeError, match="no reducer for event Event"):
        evolve(state, Event(run_id="r", seq=3))
