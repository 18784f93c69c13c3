"""Diff (SPEC §3.5, RunDiff of §4.6): aligned paths, memory deltas, cost, terminal, score."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forklab.engine import change, diff_runs, fork, format_run_diff
from forklab.engine.fork import diff as diff_module
from forklab.engine.fork.diff import lcs_pairs
from forklab.engine.state import Execution, RunState
from tests.engine.fork.helpers import record


def _ops(diff) -> list[tuple[str, str | None, str | None]]:
    return [(s["op"], (s["base"] or {}).get("node"), (s["variant"] or {}).get("node"))
            for s in diff.path["aligned"]]


def test_the_run_diff_has_every_field_of_the_wire_shape() -> None:
    base = record("research-write")
    result = fork(base, at={"before_node": "write"}, change=change.prompt("write", "x"))

    wire = result.diff.wire()

    assert set(wire) == {"divergence", "path", "memory", "terminal", "cost",
                         "suppressed_effects", "attribution"}
    assert set(wire["path"]) == {"aligned", "inserted", "skipped"}
    assert set(wire["terminal"]) == {"base", "variant", "iterations_delta",
                                     "wall_clock_delta_ms"}
    assert set(wire["cost"]) == {"tokens_delta", "usd_delta", "incurred_usd", "per_node"}
    assert set(wire["memory"]["draft"]) == {"op", "bytes_delta", "taint_moved", "base",
                                            "variant"}
    assert wire["attribution"] == "single"


def test_a_shorter_loop_skips_the_iterations_the_variant_never_ran() -> None:
    base = record("review-loop")

    result = fork(base, at={"before_node": "review"},
                  change=change.output("review", {"verdict": "approved"}),
                  policy={"memoize": True})

    assert _ops(result.diff) == [
        ("same", "draft", "draft"), ("changed", "review", "review"),
        ("changed", "gate", "gate"),
        ("skipped", "revise", None), ("skipped", "review", None), ("skipped", "gate", None),
        ("skipped", "revise", None), ("skipped", "review", None), ("skipped", "gate", None)]
    assert result.diff.path["skipped"] == ["revise", "review", "gate"] * 2
    assert result.diff.path["inserted"] == []
    assert result.diff.divergence == {"index": 1, "base": "review", "variant": "review"}
    assert result.diff.terminal["iterations_delta"] == -2
    assert result.diff.terminal["base"] == result.diff.terminal["variant"] == "completed"
    assert result.diff.cost["incurred_usd"] == 0
    assert result.diff.cost["tokens_delta"] < 0
    assert result.diff.cost["per_node"]["revise"]["variant_usd"] == 0.0
    assert "draft → review@fork → gate@fork → -revise → -review → -gate" in result.explain()


def test_memory_deltas_carry_op_byte_delta_and_values() -> None:
    base = record("triage-router")

    result = fork(base, at={"before_node": "reply"},
                  change=[change.output("reply", {"reply": "ok"}),
                          change.memory(set={"note": "vip"}, delete=["ticket"])])

    memory = result.diff.memory
    assert memory["note"] == {"op": "added", "bytes_delta": 5, "taint_moved": False,
                              "base": None, "variant": "vip"}
    assert memory["ticket"]["op"] == "removed"
    assert memory["ticket"]["bytes_delta"] == -len(f'"{base.state.memory["ticket"]}"'.encode())
    assert memory["reply"]["op"] == "changed"
    assert memory["reply"]["bytes_delta"] == len(b'"ok"') - len(
        f'"{base.state.memory["reply"]}"'.encode())
    assert "category" not in memory


def test_two_changes_are_combined_and_the_diff_says_it_cannot_attribute() -> None:
    base = record("research-write")

    result = fork(base, at={"before_node": "write"},
                  change=[change.prompt("write", "x"), change.temperature("write", 0.1)])

    assert result.diff.attribution == "combined"
    assert "2 changes combined: the delta cannot be attributed" in result.explain()


def test_a_scorer_adds_base_variant_and_delta() -> None:
    base = record("research-write")

    result = fork(base, at={"before_node": "write"}, change=change.prompt("write", "x"),
                  scorer=lambda state: len(state.memory.get("draft", "")))

    score = result.diff.score
    assert score == {"base": float(len(base.state.memory["draft"])),
                     "variant": float(len(result.state.memory["draft"])),
                     "delta": float(len(result.state.memory["draft"])
                                    - len(base.state.memory["draft"]))}
    assert result.diff.wire()["score"] == score
    assert "  score     " in result.explain()


def test_diff_runs_of_a_run_with_itself_is_empty() -> None:
    base = record("panel-vote")

    diff = diff_runs(base.state, base.state)

    assert diff.divergence is None
    assert diff.memory == {}
    assert {s["op"] for s in diff.path["aligned"]} == {"same"}
    assert diff.cost["tokens_delta"] == 0 and diff.cost["usd_delta"] == 0


def test_format_run_diff_renders_the_explain_block() -> None:
    base = record("triage-router")
    result = fork(base, at={"before_node": "route"}, change=change.route("route", "escalate"))

    text = format_run_diff(result.diff, "HEADER")

    lines = text.splitlines()
    assert lines[0] == "HEADER"
    assert lines[1] == "  change    route 'route' -> 'escalate'"
    assert lines[2] == "  status    blocked (base completed)"
    assert lines[3] == "  path      classify → route@fork → -reply → +escalate"
    assert lines[4].startswith("  cost      $0.0000 incurred, ")
    assert lines[5].startswith("  memory    -reply (-")
    assert lines[6].startswith("  blocked   escalate: the base run never executed")
    assert format_run_diff(result.diff).splitlines()[0] == "  change    route 'route' -> 'escalate'"


# -- alignment on synthetic paths ----------------------------------------------------------


def _state(nodes: list[str], outputs: dict[int, str] | None = None,
           status: str = "completed") -> RunState:
    state = RunState(status=status)
    counts: dict[str, int] = {}
    for i, node in enumerate(nodes):
        counts[node] = counts.get(node, 0) + 1
        state.executions.append(Execution(
            node=node, kind="tool", occurrence=counts[node], iteration=1, start_seq=i,
            fingerprint="", reads={}, started_at=0.0, status="completed",
            writes={"out": (outputs or {}).get(i, node)}))
    return state


def test_a_node_reexecuted_in_the_same_place_coalesces_into_one_changed_step() -> None:
    base = _state(["a", "b", "c"])
    variant = _state(["a", "b", "c"], outputs={1: "different"})

    diff = diff_runs(base, variant)

    assert _ops(diff) == [("same", "a", "a"), ("changed", "b", "b"), ("same", "c", "c")]


def test_a_replaced_node_is_a_skip_and_an_insert_and_a_matched_node_with_new_output_changed(
) -> None:
    base = _state(["a", "x", "y", "d"])
    variant = _state(["a", "z", "y", "d"], outputs={2: "new y"})

    diff = diff_runs(base, variant)

    assert _ops(diff) == [("same", "a", "a"), ("skipped", "x", None), ("inserted", None, "z"),
                          ("changed", "y", "y"), ("same", "d", "d")]
    assert diff.divergence == {"index": 1, "base": "x", "variant": None}


def test_ten_thousand_step_paths_align_with_the_right_ops() -> None:
    nodes = [f"n{i % 7}" for i in range(10_000)]
    edited = list(nodes)
    for i in range(100, 10_000, 1000):
        edited[i] = "other"
    base, variant = _state(nodes), _state(edited, outputs={5000: "moved"})

    diff = diff_runs(base, variant)

    ops = [s["op"] for s in diff.path["aligned"]]
    assert ops.count("skipped") == ops.count("inserted") == 10
    assert ops.count("same") == 10_000 - 10 - 1
    assert ops.count("changed") == 1
    assert diff.divergence["index"] == 100


def _dp_lcs_length(a: list[str], b: list[str]) -> int:
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) - 1, -1, -1):
        for j in range(len(b) - 1, -1, -1):
            table[i][j] = (table[i + 1][j + 1] + 1 if a[i] == b[j]
                           else max(table[i + 1][j], table[i][j + 1]))
    return table[0][0]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from("abcd"), max_size=30), st.lists(st.sampled_from("abcd"),
                                                                 max_size=30))
def test_lcs_pairs_is_a_longest_common_subsequence(a: list[str], b: list[str]) -> None:
    pairs = lcs_pairs(a, b)

    assert all(a[i] == b[j] for i, j in pairs)
    assert all(i1 < i2 and j1 < j2 for (i1, j1), (i2, j2) in itertools.pairwise(pairs))
    assert len(pairs) == _dp_lcs_length(a, b)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from("abc"), max_size=25), st.lists(st.sampled_from("abc"),
                                                                max_size=25))
def test_every_step_of_both_paths_appears_once_in_the_alignment(a: list[str],
                                                                 b: list[str]) -> None:
    diff = diff_runs(_state(a), _state(b))

    aligned = diff.path["aligned"]
    assert [s["base"]["node"] for s in aligned if s["base"]] == a
    assert [s["variant"]["node"] for s in aligned if s["variant"]] == b
    for step in aligned:
        if step["op"] in ("same", "changed"):
            assert step["base"]["node"] == step["variant"]["node"]


MODES = {"bit-parallel": {}, "myers": {"BITS_MAX_CELLS": 0},
         "difflib": {"BITS_MAX_CELLS": 0, "MYERS_MAX_D": 0}}


@pytest.mark.parametrize("mode", list(MODES))
@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from("abc"), max_size=25), st.lists(st.sampled_from("abc"),
                                                                max_size=25))
def test_each_lcs_strategy_aligns_both_paths_in_order(mode: str, a: list[str],
                                                      b: list[str]) -> None:
    saved = {name: getattr(diff_module, name) for name in MODES[mode]}
    for name, value in MODES[mode].items():
        setattr(diff_module, name, value)
    try:
        pairs = lcs_pairs(a, b)
        diff = diff_runs(_state(a), _state(b))
    finally:
        for name, value in saved.items():
            setattr(diff_module, name, value)

    assert all(a[i] == b[j] for i, j in pairs)
    assert all(i1 < i2 and j1 < j2 for (i1, j1), (i2, j2) in itertools.pairwise(pairs))
    if mode != "difflib":  # the last resort is a good alignment, not always a longest one
        assert len(pairs) == _dp_lcs_length(a, b)
    aligned = diff.path["aligned"]
    assert [s["base"]["node"] for s in aligned if s["base"]] == a
    assert [s["variant"]["node"] for s in aligned if s["variant"]] == b


def test_outputs_compare_as_canonical_json() -> None:
    def with_writes(writes: dict) -> RunState:
        state = _state(["a"])
        state.executions[0].writes = writes
        return state

    def op(base: dict, variant: dict) -> str:
        return diff_runs(with_writes(base), with_writes(variant)).path["aligned"][0]["op"]

    assert op({"out": 1}, {"out": 1}) == "same"
    assert op({"out": 1, "gone": None}, {"out": 1}) == "same"
    assert op({"b": 1, "a": [1, 2]}, {"a": [1, 2], "b": 1}) == "same"
    assert op({"out": 1}, {"out": True}) == "changed"
    assert op({"out": 1}, {"out": 1.5}) == "changed"
    assert op({"out": [1, 2]}, {"out": [2, 1]}) == "changed"
