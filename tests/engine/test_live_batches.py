"""Live events are stored in batches, at flush points that keep crash semantics honest.

- before every outside call the log already holds what led to it (the request, with every
  earlier call's result), whether the node runs in place or on the pool at the head;
- a node that called out is stored whole (through ``node.completed``) before the next
  starts; nodes that call nothing are only folded and queued;
- at every flush the stored log folds to exactly the runner's live state, for every
  scenario (``test_fold_invariant`` checks every single event with a batch of one);
- a chain of agent nodes costs two appends per node, not one per event — one when its model
  calls are fast (``Runner.fast_call_s``): a fast call's start and request then wait for the
  node's end, while every earlier paid result is still stored before the next call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from forklab.engine import parse_graph
from forklab.engine.canonical import canonical_equals
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.events import Event
from forklab.engine.providers import ChatRequest, ChatResponse, ScriptedProvider
from forklab.engine.reducers import fold
from forklab.engine.runner import Runner
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.store import MemoryStore
from tests.engine.golden_tool import scenario_hitl


class FlushCheckingStore(MemoryStore):
    """A MemoryStore that, after each append, checks the stored log folds to the live state."""

    def __init__(self) -> None:
        super().__init__()
        self.runner: Runner | None = None
        self.appends: list[list[str]] = []
        self.checked = 0

    def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> None:
        super().append(run_id, events, expected_seq=expected_seq)
        self.appends.append([e.type for e in events])
        runner = self.runner
        if runner is not None and run_id == runner.run_id:
            assert runner.state.version == events[-1].seq, "a flush left events behind"
            assert canonical_equals(fold(self.read(run_id)).to_wire(), runner.state.to_wire())
            self.checked += 1


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_stored_log_folds_to_the_live_state_at_every_flush(name: str) -> None:
    scenario = SCENARIOS[name]
    store = FlushCheckingStore()
    env = Environment(clock=FixedClock(), ids=counter_ids("run"))
    runner = Runner(scenario.graph(), store=store, run_id="run-live", env=env,
                    hitl=scenario_hitl(scenario))
    store.runner = runner
    runner.start(dict(scenario.input))

    assert runner.state.finished, f"{name} ended {runner.state.status}"
    assert store.checked >= 1
    assert store.last_seq("run-live") == runner.state.version  # nothing left unstored


def chain(n: int, max_concurrency: int = 1) -> Any:
    nodes = [{"id": f"n{i}", "kind": "agent", "agent": {"system_prompt": f"step {i}"},
              "reads": ["task" if i == 0 else f"n{i - 1}"], "writes": [f"n{i}"],
              "prompt": "{task}" if i == 0 else f"{{n{i - 1}}}"} for i in range(n)]
    return parse_graph({"id": "chain", "start": "n0", "nodes": nodes,
                        "edges": [{"from": f"n{i - 1}", "to": f"n{i}"} for i in range(1, n)],
                        "max_concurrency": max_concurrency})


class LogWatchingProvider:
    """The scripted provider; before answering it reads the log: the request must be there."""

    name = "scripted"

    def __init__(self, store: MemoryStore, run_id: str) -> None:
        self.inner, self.store, self.run_id = ScriptedProvider(), store, run_id
        self.seen: list[tuple[str, str | None]] = []
        # per call: the calling node (from its system prompt), the last stored event's type
        # and node, and every node with an event stored
        self.calls: list[tuple[str, str, str | None, set[str | None]]] = []

    def complete(self, request: ChatRequest) -> ChatResponse:
        log = self.store.read(self.run_id)
        self.seen.append((log[-1].type, log[-1].node))
        self.calls.append((request.system_prompt.split()[-1], log[-1].type, log[-1].node,
                           {e.node for e in log}))
        return self.inner.complete(request)


@pytest.mark.parametrize("max_concurrency", [1, 4])
def test_a_chain_stores_each_request_before_its_call_in_two_appends_per_node(
    max_concurrency: int
) -> None:
    store = FlushCheckingStore()
    provider = LogWatchingProvider(store, "run-chain")
    env = Environment(clock=FixedClock(), ids=counter_ids("run"))
    env.providers.register(provider)
    runner = Runner(chain(5, max_concurrency), store=store, run_id="run-chain", env=env)
    runner.fast_call_s = 0  # no call counts as fast: every request is stored before its call
    store.runner = runner
    runner.start({"task": "count"})

    assert runner.state.status == "completed"
    assert provider.seen == [("agent.requested", f"n{i}") for i in range(5)]
    # run.started + n0's start and request; then per node its result and end, and the
    # next node's start and request; the last node's end with run.completed
    assert store.appends[0] == ["run.started", "node.started", "agent.requested"]
    assert store.appends[1] == ["agent.responded", "memory.written", "node.completed"]
    assert store.appends[2] == ["node.started", "agent.requested"]
    assert store.appends[-1] == ["run.completed"]
    assert len(store.appends) == 2 * 5 + 1


@pytest.mark.parametrize("max_concurrency", [1, 4])
def test_a_chain_of_fast_calls_stores_each_node_in_one_append(max_concurrency: int) -> None:
    store = FlushCheckingStore()
    provider = LogWatchingProvider(store, "run-fast")
    env = Environment(clock=FixedClock(), ids=counter_ids("run"))
    env.providers.register(provider)
    runner = Runner(chain(5, max_concurrency), store=store, run_id="run-fast", env=env)
    runner.fast_call_s = 3600.0  # every call counts as fast, whatever the machine's load
    store.runner = runner
    runner.start({"task": "count"})

    assert runner.state.status == "completed"
    # the first call has no previous one to judge by: its request is stored first
    assert store.appends[0] == ["run.started", "node.started", "agent.requested"]
    assert store.appends[1] == ["agent.responded", "memory.written", "node.completed"]
    node = ["node.started", "agent.requested", "agent.responded", "memory.written",
            "node.completed"]
    assert store.appends[2:] == [node, node, node, node, ["run.completed"]]
    # each later call saw its own request unstored, and every earlier node stored whole
    assert provider.seen == [("agent.requested", "n0")] + [
        ("node.completed", f"n{i - 1}") for i in range(1, 5)]
    assert store.last_seq("run-fast") == runner.state.version


def test_a_second_call_of_one_node_waits_for_the_first_ones_result_to_be_stored() -> None:
    """Deferring a fast call's request never defers a paid result past the next call."""
    store = FlushCheckingStore()
    provider = LogWatchingProvider(store, "run-roles")
    env = Environment(clock=FixedClock(), ids=counter_ids("run"))
    env.providers.register(provider)
    graph = parse_graph({
        "id": "roles", "start": "first",
        "nodes": [
            {"id": "first", "kind": "agent", "agent": {"system_prompt": "first"},
             "reads": ["task"], "writes": ["first"], "prompt": "{task}"},
            {"id": "panel", "kind": "agent", "reads": ["first"], "writes": ["a", "b"],
             "prompt": "{first}",
             "roles": {"a": {"agent": {"system_prompt": "panel a"}, "writes": "a"},
                       "b": {"agent": {"system_prompt": "panel b"}, "writes": "b"}}},
        ],
        "edges": [{"from": "first", "to": "panel"}],
    })
    runner = Runner(graph, store=store, run_id="run-roles", env=env)
    runner.fast_call_s = 3600.0
    store.runner = runner
    runner.start({"task": "decide"})

    assert runner.state.status == "completed"
    # first's call (stored before), panel's role a (fast: deferred), then role b: a's
    # result is stored (with b's request) before b is called
    assert provider.seen == [("agent.requested", "first"), ("node.completed", "first"),
                             ("agent.requested", "panel")]
    assert store.appends[2] == ["node.started", "agent.requested", "agent.responded",
                                "memory.written", "agent.requested"]


def test_a_batch_of_one_appends_every_event_as_it_is_made() -> None:
    store = FlushCheckingStore()
    env = Environment(clock=FixedClock(), ids=counter_ids("run"))
    runner = Runner(chain(3), store=store, run_id="run-one", env=env)
    runner.batch_limit = 1
    store.runner = runner
    runner.start({"task": "count"})

    assert runner.state.status == "completed"
    assert all(len(types) == 1 for types in store.appends)
    assert len(store.appends) == runner.state.version


def test_a_head_on_the_pool_waits_for_its_request_to_be_stored_before_calling() -> None:
    """Workers of a fan-out run on the pool; each one that reaches the head before its call
    stores its request first (one that called while still ahead of the head has no place
    in the log yet: its events land, whole, when it becomes the head)."""
    store = FlushCheckingStore()
    run_id = "run-fan"
    provider = LogWatchingProvider(store, run_id)
    workers = [f"w{i}" for i in range(4)]
    graph = parse_graph({
        "id": "fan", "start": "plan", "max_concurrency": 4,
        "nodes": [
            {"id": "plan", "kind": "agent", "agent": {"system_prompt": "plan"},
             "reads": ["task"], "writes": ["plan"], "prompt": "{task}"},
            *({"id": w, "kind": "agent", "agent": {"system_prompt": f"worker {w}"},
               "reads": ["plan"], "writes": [w], "prompt": "{plan}"} for w in workers),
        ],
        "edges": [{"from": "plan", "to": w} for w in workers],
    })
    env = Environment(ids=counter_ids("run"))
    env.providers.register(provider)
    runner = Runner(graph, store=store, run_id=run_id, env=env)
    store.runner = runner
    runner.start({"task": "split"})

    assert runner.state.status == "completed"
    assert provider.seen[0] == ("agent.requested", "plan")
    events = store.read(run_id)
    for node in workers:  # each worker's events are contiguous, in frontier order
        types = [e.type for e in events if e.node == node]
        assert types == ["node.started", "agent.requested", "agent.responded",
                         "memory.written", "node.completed"]
    # whatever the timing: a worker that called at the head saw its own request last in the
    # log; one that called while ahead of the head had nothing of its own stored yet
    workers_calls = [c for c in provider.calls if c[0] in workers]
    assert len(workers_calls) == len(workers)
    for caller, last_type, last_node, stored in workers_calls:
        assert (last_type, last_node) == ("agent.requested", caller) or caller not in stored
