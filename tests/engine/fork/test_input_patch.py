"""An input patch means "the run had started with this input" (issue 8 point 1).

A patched key a node before the point read — even a declared read of a key absent when
recorded — moves the point to before the first such node; a key a prefix node overwrote
without reading keeps that node's value; the result says when and why the point moved.
"""

from __future__ import annotations

import itertools
from typing import Any

from forklab.engine import change, fork, fork_points, prepare_fork
from forklab.engine.canonical import canonical_equals
from forklab.engine.graph import parse_graph
from forklab.engine.recording import run_recorded
from tests.engine.fork.helpers import make_env


def _env() -> Any:
    env = make_env()
    env.tools.register("t.echo", lambda args, ctx: dict(args))
    env.tools.register("t.const", lambda args, ctx: args["value"])
    return env


def _tool(node_id: str, writes: list[str], reads: list[str], **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "kind": "tool", "tool": "t.echo", "reads": reads, "writes": writes,
            **extra}


def _record(nodes: list[dict[str, Any]], input: dict[str, Any]) -> Any:
    edges = [{"from": a["id"], "to": b["id"]} for a, b in itertools.pairwise(nodes)]
    spec = {"id": "chain", "start": nodes[0]["id"], "nodes": nodes, "edges": edges}
    return run_recorded(parse_graph(spec), input, env=_env())


CHAIN = [
    _tool("first", ["seen"], ["topic"]),
    _tool("uses_extra", ["a"], ["extra", "topic"]),
    _tool("last", ["b"], ["a"]),
]


def test_a_declared_read_of_a_key_absent_when_recorded_moves_the_point() -> None:
    base = _record(CHAIN, {"topic": "t"})
    assert "extra" not in base.state.executions[1].reads

    result = fork(base, at={"before_node": "last"}, change=change.input_patch({"extra": 1}))

    assert result.effective_fork_sequence_id == base.state.executions[1].start_seq - 1
    assert result.fork_node_id == "uses_extra"
    assert result.state.memory["a"] == {"extra": 1, "topic": "t"}
    assert result.state.memory["b"] == {"a": {"extra": 1, "topic": "t"}}


def test_the_point_moves_to_before_the_first_reader_not_to_the_start() -> None:
    base = _record([_tool("zero", ["z"], []), _tool("reader", ["r"], ["x"]),
                    _tool("end", ["e"], ["r"])], {"x": 1})

    result = fork(base, at={"before_node": "end"}, change=change.input_patch({"x": 2}))

    assert (result.point.node, result.fork_node_id) == ("end", "reader")
    assert [e.node for e in result.prefix_state.executions] == ["zero"]
    assert [(c["node"], c["label"]) for c in result.calls] == [
        ("reader", "changed"), ("end", "changed")]
    assert result.state.memory["e"] == {"r": {"x": 2}}


def test_the_result_says_the_point_moved_from_where_to_where_and_why() -> None:
    base = _record(CHAIN, {"topic": "t"})

    result = fork(base, at={"before_node": "last"}, change=change.input_patch({"extra": 1}))

    moved = [w for w in result.warnings if "moved" in w]
    requested, effective = result.fork_sequence_id, result.effective_fork_sequence_id
    assert moved == [
        f"the fork point moved from seq {requested} (before 'last' execution 1, iteration 1) "
        f"to seq {effective} (before 'uses_extra' execution 1, iteration 1): the input patch "
        "changes ['extra'] and 'uses_extra' (execution 1) read 'extra' before the requested "
        "point; unchanged calls reuse their recordings (memoize is on)"]
    assert f"  point     {moved[0]}" in result.explain()
    assert result.explain().splitlines()[1].startswith("  point     the fork point moved")
    again = fork(base, at={"before_node": "last"}, change=change.input_patch({"extra": 1}),
                 dry_run=True)
    assert f"  point     {moved[0]}" in again.explain()


OVERWRITE = [
    _tool("reset", ["k"], [], tool="t.const", params={"value": 5}),
    _tool("use", ["seen"], ["k"]),
]


def test_a_key_a_prefix_node_overwrote_without_reading_keeps_that_nodes_value() -> None:
    base = _record(OVERWRITE, {"k": 0})
    assert base.state.memory["seen"] == {"k": 5}

    result = fork(base, at={"before_node": "use"}, change=change.input_patch({"k": 9}))

    assert result.effective_fork_sequence_id == result.fork_sequence_id
    assert result.state.input["k"] == 9
    assert result.state.memory["k"] == 5
    assert result.state.memory["seen"] == {"k": 5}
    assert any("'k' was overwritten by 'reset'" in w for w in result.warnings)


def test_an_input_patch_gives_the_same_outcome_at_start_and_at_any_later_point() -> None:
    base = _record([*OVERWRITE, _tool("tail", ["t"], ["extra"])], {"k": 0})
    patch = change.input_patch({"k": 9, "extra": "x"})

    points = [p for p in fork_points(base.event_log) if p.kind == "before_node"]

    outcomes = [fork(base, at=p.address(), change=patch).state.outcome() for p in points]

    assert all(canonical_equals(o, outcomes[0]) for o in outcomes)
    assert outcomes[0]["memory"]["t"] == {"extra": "x"}


def test_a_patch_the_prefix_never_read_keeps_memoize_as_asked() -> None:
    base = _record(CHAIN, {"topic": "t"})

    plan = prepare_fork(base, at={"before_node": "last"}, change=change.input_patch({"z": 1}))

    assert plan.effective is plan.point or plan.effective == plan.point
    assert plan.memoize is False
