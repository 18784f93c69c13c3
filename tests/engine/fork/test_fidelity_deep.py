"""``deep_check`` (``forkcheck --deep``): the metamorphic checks 1, 2 and 4 of issue 8 over a
recorded run, with changes derived from the run itself, forked into a scratch store."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from forklab.engine.canonical import canonical_equals
from forklab.engine.environment import Environment
from forklab.engine.errors import ForklabError
from forklab.engine.events import Event
from forklab.engine.fork.base import fork_points
from forklab.engine.fork.core import load_base
from forklab.engine.fork.fidelity import (
    DEEP_MARKER,
    deep_check,
    derived_changes,
    recorded_human,
)
from forklab.engine.fork.result import fork
from forklab.engine.fork.scratch import ScratchStore
from forklab.engine.graph import GraphSpec, parse_graph
from forklab.engine.providers import ChatRequest, ChatResponse, ProviderRegistry
from forklab.engine.recording import run_recorded
from forklab.engine.state import RunState
from forklab.engine.store import MemoryStore
from tests.engine.fork.helpers import NAMES, make_env, record

CHECKS = {"point_independence", "memoize", "fork_of_fork"}


@pytest.mark.parametrize("name", NAMES)
def test_every_metamorphic_check_holds_on_every_demo_scenario(name: str) -> None:
    base = record(name)

    results = deep_check(base.run_id, store=base.store, env=base.env)

    failed = [r.detail for r in results if not r.ok]
    assert not failed, "\n".join(failed)
    assert {r.check for r in results} == CHECKS
    assert any(r.compared for r in results), "nothing was compared"


def test_each_check_compares_something_somewhere_in_the_demo_scenarios() -> None:
    compared = set()
    for name in NAMES:
        base = record(name)
        compared |= {r.check for r in deep_check(base.run_id, store=base.store, env=base.env)
                     if r.compared}

    assert compared == CHECKS


def test_the_changes_are_derived_from_the_run() -> None:
    base = record("research-write")

    changes = [c.wire() for c in derived_changes(load_base(base, store=None, env=None))]

    prompt, memory, patch = changes
    assert prompt["kind"] == "prompt" and prompt["target"] == "write"  # its last agent node
    assert prompt["system_prompt"].endswith(f"({DEEP_MARKER})")
    assert memory == {"kind": "memory", "set": {"notes": DEEP_MARKER}, "delete": []}
    assert patch == {"kind": "input_patch", "patch": {"goal": DEEP_MARKER}}


HIDDEN = {
    "id": "hidden", "start": "tick",
    "nodes": [
        {"id": "tick", "kind": "tool", "tool": "t.tick", "writes": ["n"]},
        {"id": "say", "kind": "agent", "agent": {"model": "scripted-small"}, "reads": ["n"],
         "writes": ["said"], "prompt": "Count {n}"},
    ],
    "edges": [{"from": "tick", "to": "say"}],
}


def _hidden_state_run() -> Any:
    ticks = itertools.count()
    env = make_env()
    env.tools.register("t.tick", lambda args, ctx: next(ticks))
    return run_recorded(parse_graph(HIDDEN), {}, env=env)


def test_a_tool_with_hidden_state_breaks_a_relation_and_the_check_prints_the_diff() -> None:
    base = _hidden_state_run()

    results = deep_check(base.run_id, store=base.store, env=base.env)

    memo = next(r for r in results if r.check == "memoize" and r.changes[0]["kind"] == "memory")
    assert not memo.ok
    assert memo.detail.splitlines()[0].startswith("memoize: memory =n")
    assert "memory" in memo.detail and "~n" in memo.detail


class _Echo:
    name = "other"

    def complete(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(text="same", input_tokens=1, output_tokens=1)


def test_a_run_on_a_provider_that_is_not_scripted_is_skipped_saying_why() -> None:
    env = make_env()
    env.providers = ProviderRegistry({"other": _Echo()})
    graph = parse_graph({"id": "g", "start": "a", "nodes": [
        {"id": "a", "kind": "agent", "agent": {"provider": "other", "model": "m"},
         "writes": ["x"]}]})
    base = run_recorded(graph, {}, env=env)

    results = deep_check(base.run_id, store=base.store, env=env)

    assert {r.check for r in results} == CHECKS
    assert all(r.ok and "other" in r.skipped and not r.compared for r in results)


class _ReadOnly(MemoryStore):
    """A store that refuses every write once sealed."""

    sealed = False

    def _refuse(self) -> None:
        if self.sealed:
            raise AssertionError("the durable store was written")

    def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> None:
        self._refuse()
        super().append(run_id, events, expected_seq=expected_seq)

    def save_graph(self, graph: GraphSpec) -> int:
        self._refuse()
        return super().save_graph(graph)

    def save_snapshot(self, run_id: str, state: RunState) -> None:
        self._refuse()
        super().save_snapshot(run_id, state)


@pytest.mark.parametrize("name", ["diamond", "order-fulfilment", "review-loop"])
def test_deep_checks_write_nothing_to_the_store_of_the_runs(name: str) -> None:
    store = _ReadOnly()
    base = record(name, store=store)
    store.sealed = True
    runs = store.run_ids()

    deep_check(base.run_id, store=store, env=base.env)

    assert store.run_ids() == runs


def test_the_scratch_store_reads_through_and_keeps_its_writes() -> None:
    durable = MemoryStore()
    base = record("research-write", store=durable)
    scratch = ScratchStore(durable)
    graph = base.graph

    assert canonical_equals([e.to_wire() for e in scratch.read(base.run_id)],
                            [e.to_wire() for e in durable.read(base.run_id)])
    assert scratch.save_graph(graph) == durable.graph_versions(graph.id)[-1]  # identical
    changed = parse_graph({**graph.to_wire(), "description": "changed"})
    assert scratch.save_graph(changed) == 2 and durable.graph_versions(graph.id) == [1]
    assert scratch.load_graph(graph.id).description == "changed"
    assert durable.load_graph(graph.id).description != "changed"


def test_deep_check_of_an_unknown_run_is_not_found() -> None:
    with pytest.raises(ForklabError) as refused:
        deep_check("nope", store=MemoryStore(), env=Environment())

    assert refused.value.code == "not_found"


def test_a_gate_shown_what_it_was_shown_before_gets_its_recorded_answer_and_otherwise_none(
) -> None:
    from forklab.engine.fork.fidelity import recorded_human

    base = record("order-fulfilment")
    gate = next(e for e in base.state.executions if e.kind == "approval")
    human = recorded_human(base.state)

    same = human({"node": gate.node, "prompt": "?", "context": dict(gate.reads)})
    other = human({"node": gate.node, "prompt": "?", "context": {"receipt": "another"}})

    assert same is not None and same.decision == "approved"
    assert other is None


GATED = {
    "id": "gated", "start": "gate",
    "nodes": [
        {"id": "gate", "kind": "approval", "reads": ["q"], "writes": ["decision"]},
        {"id": "say", "kind": "agent", "agent": {"model": "scripted-small"},
         "reads": ["decision"], "writes": ["said"], "prompt": "Say {decision}"},
    ],
    "edges": [{"from": "gate", "to": "say"}],
}


def test_memoize_off_replays_a_gate_as_recorded_instead_of_pausing() -> None:
    from forklab.engine.oracle import HumanAnswer

    base = run_recorded(parse_graph(GATED), {"q": "ship?"}, env=make_env(),
                        hitl=lambda request: HumanAnswer(decision="approved"))

    results = deep_check(base.run_id, store=base.store, env=base.env)

    memo = [r for r in results if r.check == "memoize" and r.compared]
    assert memo and all(r.ok for r in memo), [r.detail for r in memo]


@pytest.mark.parametrize("name", NAMES)
def test_every_metamorphic_check_holds_on_a_fork_of_every_demo_scenario(name: str) -> None:
    """A fork's inherited executions sit in its base's log, and forking it at 'start' applies
    its own changes earlier: each check addresses points in the log holding them and compares
    the fork's own points with its own first one."""
    base = record(name)
    items = derived_changes(load_base(base, store=None, env=None))
    variant = fork(base, at=fork_points(base.event_log)[1].address(), change=items[1:2],
                   hitl=recorded_human(base.state))

    results = deep_check(variant.run_id, store=base.store, env=base.env)

    failed = [r.detail for r in results if not r.ok]
    assert not failed, "\n".join(failed)
    assert any(r.compared for r in results), "nothing was compared"
