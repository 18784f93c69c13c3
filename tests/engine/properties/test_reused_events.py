"""A served node is one ``node.reused`` event (issue 11;
docs/forking.md#served-nodes-one-nodereused-event).

- the one-event form folds to the state the multi-event form (``node.started``, the served
  action events, ``memory.written``, ``node.completed``) folds to, seq numbers and clock
  readings aside — for any graph, change, point and side-effect policy;
- the stored log of a fork with ``node.reused`` events folds to the state the runner held,
  and strict replay re-drives it without divergence;
- the events a reader expands a ``node.reused`` into (``forklab.engine.reused_form``) fold
  like the multi-event form too;
- a fork log of either form (every scenario) strictly replays in its own form;
- fingerprints are recomputed, never read from the base's log: an execution whose recorded
  fingerprint was edited is never served whole (a null fork executes it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points
from forklab.engine.canonical import canonical_json
from forklab.engine.events import NodeCompleted, NodeReused, NodeStarted, from_wire
from forklab.engine.fork.replay import replay
from forklab.engine.recording import run_recorded
from forklab.engine.reducers import fold
from forklab.engine.reused_form import expand_all
from forklab.engine.runner import Runner
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.state import RunState
from tests.engine.golden_tool import deterministic_env, scenario_hitl
from tests.engine.properties.changes import changes
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import assert_fold_matches, record_case
from tests.engine.properties.world import Harness, hitl

_POSITIONAL = {"start_seq", "end_seq", "started_at", "finished_at", "seq"}


def _strip(value: Any, children: dict[str, str], known: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {k: (_child(v, children, known) if k == "child_run_id"
                    else _strip(v, children, known))
                for k, v in value.items() if k not in _POSITIONAL}
    if isinstance(value, list):
        return [_strip(v, children, known) for v in value]
    return value


def _child(run_id: Any, children: dict[str, str], known: frozenset[str]) -> Any:
    """A child run this run started itself is named by the order it was started in: two
    forks that each run a subgraph live start two child runs, with two ids."""
    if run_id in known or not isinstance(run_id, str):
        return run_id
    return children.setdefault(run_id, f"<child {len(children)}>")


def comparable(state: RunState, *, known: frozenset[str] = frozenset()) -> str:
    """The whole state but which run it is, where things are in its log and when (run id,
    seqs, clock readings), and which ids the child runs it started have (``known``: run
    ids that existed before it — a served subgraph names its base's child, kept as is)."""
    wire = state.to_wire()
    for key in ("run_id", "version", "started_at", "finished_at"):
        wire.pop(key)
    return canonical_json(_strip(wire, {}, known))


@contextmanager
def multi_event_reuse() -> Iterator[None]:
    """Forks started inside write served nodes in the multi-event form (pre-node.reused)."""
    Runner.one_event_reuse = False
    try:
        yield
    finally:
        Runner.one_event_reuse = True


def _draw_fork(data: st.DataObject, case: Any, h: Harness) -> tuple[Any, dict[str, Any]]:
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    side_effects = data.draw(st.sampled_from(["replay", {"allow": True}]), label="side_effects")
    return base, {"at": {"sequence": point.seq}, "change": item, "hitl": hitl,
                  "ignore_budget": True,
                  "policy": {"memoize": True, "side_effects": side_effects}}


def _served(store: Any, run_id: str) -> list[NodeReused]:
    return [e for e in store.read(run_id) if isinstance(e, NodeReused)]


@examples(100)
@given(case=graph_cases(), data=st.data())
def test_one_event_and_multi_event_reuse_fold_to_the_same_state(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base, run = _draw_fork(data, case, h)
    known = frozenset(base.store.run_ids())
    one = fork(base, **run)
    with multi_event_reuse():
        multi = fork(base, **run)

    assert comparable(one.state, known=known) == comparable(multi.state, known=known)
    served = _served(base.store, one.run_id)
    hits = [e for e in one.state.executions[one.state.prefix_executions:] if e.memo]
    assert len(served) == len(hits), "every completed memo hit is one node.reused event"
    assert not _served(base.store, multi.run_id)
    assert_fold_matches(base.store, one.state)
    assert_fold_matches(base.store, multi.state)


@examples(60)
@given(case=graph_cases(), data=st.data())
def test_a_reused_event_expanded_for_readers_folds_like_the_multi_event_form(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base, run = _draw_fork(data, case, h)
    one = fork(base, **run)
    log = base.store.read(one.run_id)
    assume(any(isinstance(e, NodeReused) for e in log))
    expanded = expand_all([e.to_wire() for e in log])
    # renumbered, the expansion is a log of its own: it folds to the one-event state
    events = [from_wire({**w, "seq": n}) for n, w in enumerate(expanded, start=1)]
    assert comparable(fold(events)) == comparable(one.state)


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_strict_replay_re_drives_a_null_fork_of_reused_events(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base, run = _draw_fork(data, case, h)
    one = fork(base, **{**run, "change": None})
    assume(one.state.finished and _served(base.store, one.run_id))
    replayed = replay(one.run_id, store=base.store, env=h.env)  # strict: raises on divergence
    assert comparable(replayed) == comparable(one.state)


@examples(60)
@given(case=graph_cases(), data=st.data())
def test_an_execution_whose_recorded_fingerprint_was_edited_is_never_served_whole(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    starts = [e for e in base.event_log if isinstance(e, NodeStarted)]
    edited = data.draw(st.sampled_from(starts), label="edited node.started")
    point = max((p for p in fork_points(base.event_log) if p.seq < edited.seq),
                key=lambda p: p.seq)
    run = {"at": {"sequence": point.seq}, "hitl": hitl, "ignore_budget": True,
           "policy": {"memoize": True}}
    untouched = fork(base, **run)
    key = (edited.node, edited.occurrence)
    assume(any((e.node, e.occurrence) == key and e.memo for e in untouched.state.executions))

    log = base.store._events[base.run_id]  # type: ignore[attr-defined]  # a tampered log
    log[edited.seq - 1] = dataclasses.replace(edited, fingerprint="0" * 32)
    tampered = fork(base.run_id, store=base.store, env=h.env, **run)

    served = {(e.node, e.occurrence) for e in _served(base.store, tampered.run_id)}
    assert key not in served
    assert not any((e.node, e.occurrence) == key and e.memo
                   for e in tampered.state.executions)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_fork_log_of_either_form_strictly_replays_in_its_own_form(name: str) -> None:
    scenario = SCENARIOS[name]
    base = run_recorded(scenario.graph(), scenario.input, env=deterministic_env(),
                        hitl=scenario_hitl(scenario))
    run = {"at": "start", "policy": {"memoize": True}, "ignore_budget": True,
           "hitl": scenario_hitl(scenario)}
    known = frozenset(base.store.run_ids())
    one = fork(base, **run)
    with multi_event_reuse():
        multi = fork(base, **run)
    assert comparable(one.state, known=known) == comparable(multi.state, known=known)
    served = _served(base.store, one.run_id)
    memo_ends = [e for e in base.store.read(multi.run_id)
                 if isinstance(e, NodeCompleted) and e.memo]
    assert len(served) == len(memo_ends) > 0
    for forked in (one, multi):  # strict: a re-served memo hit in another form diverges
        assert comparable(replay(forked.run_id, store=base.store)) == comparable(forked.state)
