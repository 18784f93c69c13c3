"""Strict replay (SPEC §3.8): today's graph and engine, every call served from the recording.

``tests/engine/golden/divergent/`` holds a deliberately tampered golden log that must raise
``replay_divergence``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forklab.engine import change, fork, replay
from forklab.engine.errors import ReplayDivergence
from forklab.engine.events import from_wire
from forklab.engine.fork.replay import replay_events
from forklab.engine.scenarios import load_scenario
from forklab.engine.sqlite_store import SqliteStore
from forklab.engine.store import MemoryStore
from tests.engine.fork.helpers import NAMES, Counter, graph_with, record
from tests.engine.golden_tool import load_golden

DIVERGENT = Path(__file__).parents[1] / "golden" / "divergent"


@pytest.mark.parametrize("name", NAMES)
def test_strict_replay_of_every_scenario_passes_and_calls_nothing(name: str) -> None:
    counter = Counter()
    base = record(name, counter=counter)
    counter.reset()

    state = replay(base.run_id, store=base.store, strict=True)

    assert counter.model_calls == [] and counter.tool_calls == []
    assert state.version == base.state.version
    assert state.memory == base.state.memory
    assert state.status == base.state.status


@pytest.mark.parametrize("name", NAMES)
def test_strict_replay_passes_on_every_golden_log(name: str) -> None:
    events = [from_wire(w) for w in load_golden(name)["events"]]

    state = replay_events(events, load_scenario(name), strict=True)

    assert state.version == len(events)


def test_strict_replay_through_a_durable_store_keeps_role_order(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.sqlite3")
    try:
        base = record("panel-vote", store=store)
        assert replay(base.run_id, store=store).memory == base.state.memory
    finally:
        store.close()


def test_a_graph_reloaded_from_the_memory_store_runs_roles_in_declared_order() -> None:
    store = MemoryStore()
    graph = load_scenario("panel-vote")
    store.save_graph(graph)

    vote = store.load_graph("panel-vote").node("vote")
    assert [name for name, _ in vote.ordered_roles()] == ["voters", "judge"]
    assert store.save_graph(graph) == 1


def test_the_checked_in_divergent_log_raises_replay_divergence() -> None:
    files = sorted(DIVERGENT.glob("*.json"))
    assert files, f"no divergent golden log under {DIVERGENT}"
    doc = json.loads(files[0].read_text())
    events = [from_wire(w) for w in doc["events"]]

    with pytest.raises(ReplayDivergence) as raised:
        replay_events(events, load_scenario(doc["scenario"]), strict=True)

    assert raised.value.code == "replay_divergence"
    assert raised.value.context["seq"] == doc["tampered_seq"] + 1
    assert raised.value.context["expected"]["type"] == "memory.written"
    assert raised.value.context["fields"] == ["value"]
    assert "differs in: value" in raised.value.message


def test_without_strict_the_divergent_log_replays_to_the_tampered_answer() -> None:
    doc = json.loads(sorted(DIVERGENT.glob("*.json"))[0].read_text())
    events = [from_wire(w) for w in doc["events"]]

    state = replay_events(events, load_scenario(doc["scenario"]), strict=False)

    assert state.memory["draft"] == "Vaccines are magic; no sources needed."


def test_a_prompt_that_drifted_in_the_graph_raises_replay_divergence_naming_the_node() -> None:
    base = record("research-write")
    drifted = graph_with(base.graph, "write", prompt="Goal: {goal}\nNotes: {notes}\nShorter.")

    with pytest.raises(ReplayDivergence) as raised:
        replay(base.run_id, store=base.store, graph=drifted)

    assert raised.value.context["node"] == "write"
    assert "fingerprint" in raised.value.context["fields"]
    assert "node.started of 'write'" in raised.value.message


def test_a_new_graph_version_is_what_strict_replay_checks_against() -> None:
    base = record("research-write")
    base.store.save_graph(graph_with(base.graph, "research", prompt="Dig into: {goal}"))

    with pytest.raises(ReplayDivergence):
        replay(base.run_id, store=base.store)


@pytest.mark.parametrize(("name", "at", "changes", "memoize"), [
    ("diamond", "start", change.prompt("left", "x"), True),
    ("triage-router", {"before_node": "route"}, change.route("route", "escalate"), False),
    ("flaky-tool", "failure", change.tool("fetch_inventory", {"region": "x"}), False),
    ("order-fulfilment", "start", change.human_response("rejected"), True),
])
def test_strict_replay_of_a_fork_reproduces_its_memo_hits_and_guard_refusals(
    name: str, at, changes, memoize: bool
) -> None:
    base = record(name)
    variant = fork(base, at=at, change=changes, policy={"memoize": memoize})

    state = replay(variant.run_id, store=base.store, strict=True)

    assert state.status == variant.state.status
    assert state.memory == variant.state.memory
    assert state.suppressed_effects == variant.state.suppressed_effects


def test_strict_replay_of_a_fork_whose_tail_reflected_live_passes() -> None:
    """A fork captures and discards a tool's reflection writes (``reflection.discarded``
    events before its ``tool.returned``); strict replay serves the tool from the recording
    and must re-state the discarded writes where the recording has them."""
    counter = Counter()
    base = record("research-web", counter=counter)
    variant = fork(base.run_id, at="start", store=base.store, env=base.env,
                   change=change.memory(set={"question": "Which pages did you read?"}),
                   ignore_budget=True)
    discarded = [e for e in variant.event_log if e.type == "reflection.discarded"]
    assert discarded, "the tail ran the reflecting tool live: its write was discarded"
    counter.reset()

    state = replay(variant.run_id, store=base.store, strict=True)

    assert counter.model_calls == [] and counter.tool_calls == []
    assert state.version == len(variant.event_log)
    assert state.discarded_reflections == variant.state.discarded_reflections


# -- a fork's strict replay sees graph drift (issue 35, class 4) ------------------------------


def test_strict_replay_of_a_fork_checks_against_the_graph_s_current_version() -> None:
    base = record("research-write")
    variant = fork(base, at={"before_node": "write"}, change=change.temperature("write", 0.0))
    assert replay(variant.run_id, store=base.store).version == variant.state.version
    base.store.save_graph(graph_with(base.graph, "write",
                                     prompt="Goal: {goal}\nNotes: {notes}\nShorter."))

    with pytest.raises(ReplayDivergence) as raised:
        replay(variant.run_id, store=base.store)

    assert raised.value.context["node"] == "write"
    assert "fingerprint" in raised.value.context["fields"]


def test_strict_replay_of_a_fork_ignores_drift_in_nodes_before_its_point() -> None:
    base = record("research-write")
    variant = fork(base, at={"before_node": "write"}, change=change.temperature("write", 0.0))
    base.store.save_graph(graph_with(base.graph, "research", prompt="Dig into: {goal}"))

    state = replay(variant.run_id, store=base.store)

    assert state.memory == variant.state.memory


def test_a_fork_whose_change_no_longer_applies_to_the_current_graph_diverges() -> None:
    base = record("research-write")
    variant = fork(base, at={"before_node": "write"}, change=change.temperature("write", 0.0))
    data = base.graph.to_wire()
    data["nodes"] = [{**n, "id": "writer"} if n["id"] == "write" else n for n in data["nodes"]]
    data["edges"] = [{k: ("writer" if v == "write" else v) for k, v in e.items()}
                     for e in data["edges"]]
    from forklab.engine.graph import parse_graph

    base.store.save_graph(parse_graph(data))

    with pytest.raises(ReplayDivergence) as raised:
        replay(variant.run_id, store=base.store)

    assert "no longer apply" in raised.value.message
