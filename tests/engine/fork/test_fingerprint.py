"""The memo fingerprint covers everything a node can observe (issue 8 points 2 and 3).

Each test builds a fork where memoization on and off must give the same outcome: a memo hit
on a fingerprint that leaves out something the node observes (its occurrence or iteration, a
declared key being absent rather than null, the child graph a subgraph runs) would serve a
recording the node would not have produced.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forklab.engine import change, fork
from forklab.engine.canonical import canonical_equals, canonical_json
from forklab.engine.graph import parse_graph
from forklab.engine.planner import ReadsTexts, fingerprint_reference, node_fingerprint
from forklab.engine.recording import run_recorded
from forklab.engine.store import MemoryStore
from tests.engine.fork.helpers import make_env


def _env() -> Any:
    env = make_env()
    env.tools.register("t.occurrence", lambda args, ctx: {"occ": ctx.occurrence})
    env.tools.register("t.echo", lambda args, ctx: dict(args))
    return env


def _record(spec: dict[str, Any], input: dict[str, Any] | None = None,
            store: MemoryStore | None = None) -> Any:
    return run_recorded(parse_graph(spec), input or {}, env=_env(), store=store)


def _memo_on_and_off(base: Any, policy: dict[str, Any] | None = None, **options: Any) -> tuple:
    policy = policy or {}
    on = fork(base, policy={**policy, "memoize": True}, ignore_budget=True, **options)
    off = fork(base, policy={**policy, "memoize": False}, ignore_budget=True, **options)
    return on.state, off.state


LOOP = {
    "id": "loop", "start": "b", "max_iterations": 4,
    "nodes": [
        {"id": "b", "kind": "tool", "tool": "t.occurrence", "writes": ["occ"]},
        {"id": "r", "kind": "router", "reads": ["flag", "occ"], "default": "end",
         "rules": [{"when": [{"key": "flag", "op": "truthy"}, {"key": "occ", "value": 1}],
                    "to": "b"}]},
    ],
    "edges": [{"from": "b", "to": "r"}],
}


def test_a_memo_hit_needs_the_same_occurrence_and_iteration() -> None:
    base = _record(LOOP)
    assert [e.node for e in base.state.executions] == ["b", "r"]

    on, off = _memo_on_and_off(base, at={"before_node": "r"},
                               change=change.memory(set={"flag": True}))

    assert off.status == "completed"
    assert off.memory["occ"] == 2
    assert canonical_equals(on.outcome(), off.outcome())


EXISTS = {
    "id": "exists", "start": "r",
    "nodes": [
        {"id": "r", "kind": "router", "reads": ["k"], "default": "end",
         "rules": [{"when": [{"key": "k", "op": "exists"}], "to": "b"}]},
        {"id": "b", "kind": "tool", "tool": "t.echo", "writes": ["seen"], "params": {"v": 1}},
    ],
}


def test_a_declared_key_that_is_absent_differs_from_one_set_to_null() -> None:
    base = _record(EXISTS)
    assert [e.node for e in base.state.executions] == ["r"]

    on, off = _memo_on_and_off(base, at="start", change=change.memory(set={"k": None}))

    assert [e.node for e in off.executions] == ["r", "b"]
    assert canonical_equals(on.outcome(), off.outcome())


def _child(text: str) -> dict[str, Any]:
    return {"id": "child", "start": "c", "nodes": [
        {"id": "c", "kind": "tool", "tool": "t.echo", "reads": ["topic"], "writes": ["out"],
         "params": {"text": text}}]}


PARENT = {
    "id": "parent", "start": "sub",
    "nodes": [{"id": "sub", "kind": "subgraph", "graph": "child", "reads": ["topic"],
               "input": {"topic": "topic"}, "output": {"result": "out"}}],
}


@pytest.mark.parametrize("policy", [{"side_effects": {"allow": True}}, {}])
def test_a_subgraph_memo_hit_needs_the_same_child_graph(policy: dict[str, Any]) -> None:
    store = MemoryStore()
    store.save_graph(parse_graph(_child("v1")))
    base = _record(PARENT, {"topic": "t"}, store=store)
    store.save_graph(parse_graph(_child("v2")))

    on, off = _memo_on_and_off(base, policy=policy, at="start")

    assert canonical_equals(on.outcome(), off.outcome())
    if policy:
        assert off.memory["result"] == {"text": "v2", "topic": "t"}
    else:  # the guard does not serve a child run recorded under another child graph
        assert off.status == on.status == "blocked"


def test_a_fingerprint_changes_with_occurrence_iteration_absence_and_child_graph() -> None:

    graph = parse_graph(PARENT)
    plain = node_fingerprint(graph, "sub", {"topic": "t"}, occurrence=1, iteration=1,
                             child={"graph": "h1"})
    assert plain != node_fingerprint(graph, "sub", {"topic": "t"}, occurrence=2, iteration=1,
                                     child={"graph": "h1"})
    assert plain != node_fingerprint(graph, "sub", {"topic": "t"}, occurrence=1, iteration=2,
                                     child={"graph": "h1"})
    assert plain != node_fingerprint(graph, "sub", {"topic": "t"}, occurrence=1, iteration=1,
                                     child={"graph": "h2"})
    assert (node_fingerprint(graph, "sub", {"topic": None}, occurrence=1, iteration=1)
            != node_fingerprint(graph, "sub", {}, occurrence=1, iteration=1))


_SCALARS = st.one_of(st.text(max_size=6), st.integers(-3, 3), st.booleans(), st.none(),
                     st.floats(allow_nan=False, width=16), st.sampled_from(["1", "true"]))
_SLICES = st.dictionaries(st.sampled_from(["a", "b", "é", "k"]),
                          _SCALARS | st.lists(_SCALARS, max_size=2), max_size=3)


@given(st.lists(_SLICES, max_size=12))
def test_a_remembered_read_slice_text_is_always_the_canonical_text(
        slices: list[dict[str, Any]]) -> None:
    # slices equal as values but not as text (1 / 1.0 / True, "1" / 1) and lists (could be
    # changed in place) are never answered from memory: only all-string slices are
    texts = ReadsTexts()
    for reads in slices + slices:
        text = texts(reads)
        if all(type(v) is str for v in reads.values()):
            assert text == canonical_json(reads)
        else:
            assert text is None


def test_remembered_texts_are_bounded_and_a_fingerprint_with_one_is_the_same() -> None:
    texts = ReadsTexts()
    for i in range(ReadsTexts.LIMIT * 2 + 1):
        assert texts({"k": str(i)}) == canonical_json({"k": str(i)})
        assert len(texts._texts) <= ReadsTexts.LIMIT
    graph = parse_graph(LOOP)
    reads = {"flag": "x", "occ": "1"}
    assert (node_fingerprint(graph, "r", reads, occurrence=1, iteration=2,
                             reads_text=texts(reads))
            == fingerprint_reference(graph, "r", reads, occurrence=1, iteration=2))
