"""Recording a generated case, and the helpers every property reads results with."""

from __future__ import annotations

from typing import Any

from hypothesis import note
from hypothesis.control import currently_in_test_context

from forklab.engine.canonical import canonical_equals, canonical_json
from forklab.engine.graph import GraphSpec
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.reducers import fold
from forklab.engine.state import Execution, RunState
from forklab.engine.store import MemoryStore, Store
from tests.engine.properties.graphs import GraphCase
from tests.engine.properties.world import Harness, hitl


def record_case(case: GraphCase, harness: Harness, store: Store | None = None) -> RecordedRun:
    """Save the child graphs, then record the case's graph on its input (gates answered).

    The case is noted, so a failing example prints the whole graph as a reproducer.
    """
    if currently_in_test_context():
        note(repr(case))
    store = store if store is not None else MemoryStore()
    for child in case.children:
        store.save_graph(child)
    return run_recorded(case.graph, dict(case.input), store=store, env=harness.env, hitl=hitl)


def outcome(state: RunState) -> str:
    """What "the same outcome" means: status, memory, taint, path, error, effects, totals."""
    return canonical_json(state.outcome())


def same_outcome(a: RunState, b: RunState) -> bool:
    return canonical_equals(a.outcome(), b.outcome())


def show(a: RunState, b: RunState) -> str:
    """A readable account of two outcomes (assertion messages)."""
    lines = []
    for key in ("status", "memory", "taint", "path", "error", "suppressed_effects",
                "input_tokens", "output_tokens", "cost_usd"):
        x, y = a.outcome()[key], b.outcome()[key]
        if not canonical_equals(x, y):
            lines.append(f"{key}:\n    {canonical_json(x)[:600]}\n != {canonical_json(y)[:600]}")
    return "\n".join(lines) or "(outcomes equal)"


def assert_fold_matches(store: Store, state: RunState) -> None:
    """The state folded from the stored log equals the state the runner held."""
    folded = fold(store.read(state.run_id))
    assert canonical_equals(folded.to_wire(), state.to_wire()), (
        f"fold of run {state.run_id} differs from its live state")


def executions(state: RunState) -> list[Execution]:
    return list(state.executions)


def first_execution(state: RunState, predicate: Any) -> Execution | None:
    return next((e for e in state.executions if predicate(e)), None)


def declared_reads(graph: GraphSpec, node: str) -> list[str]:
    return list(graph.node(node).reads) if node in graph.node_ids() else []


def tail_calls(state: RunState) -> list[Any]:
    start = state.tail_from_call
    return state.calls[start:]
