"""Diff (SPEC §3.5, RunDiff of §4.6): aligned paths, memory deltas, cost, terminal, score."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forklab.engine import MemoryStore, canonical_json, change, diff_runs, fork, format_run_diff
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
        ("same", "draft", "draft"), ("changed", "review", "review"), ("changed", "gate", "gate"),
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
    assert memory["ticket"]["bytes_delta"] == -len(
        canonical_json(base.state.memory["ticket"]).encode())
    assert memory["reply"]["op"] == "changed"
    assert memory["reply"]["bytes_delta"] == len(b'"ok"') - len(
        canonical_json(base.state.memory["reply"]).encode())  # the reply has newlines
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


def test_a_forks_diff_is_computed_when_first_read_and_kept(monkeypatch) -> None:
    """fork() does not walk both runs: a caller reading only the state never pays for the
    diff; the first read computes it (with the scorer and the fork's own changes) and later
    reads return the same object."""
    from forklab.engine.fork import result as result_module

    base = record("research-write")
    walked: list[int] = []
    real = result_module.diff_runs

    def counted(*args: Any, **kwargs: Any) -> Any:
        walked.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(result_module, "diff_runs", counted)
    result = fork(base, at={"before_node": "write"}, change=change.prompt("write", "x"),
                  scorer=lambda state: len(state.memory.get("draft", "")))
    assert walked == []

    diff = result.diff
    assert walked == [1] and result.diff is diff
    expected = real(base.state, result.state,
                    scorer=lambda state: len(state.memory.get("draft", "")),
                    changes=[change.prompt("write", "x").describe()])
    assert diff.wire() == expected.wire() and diff.changes == expected.changes
    assert fork(base, at={"before_node": "write"}, change=change.prompt("write", "y"),
                dry_run=True).diff is None


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


# -- steps a variant that stopped early never reached ------------------------------------------


def _costed(nodes: list[str], status: str, tokens: int = 10) -> RunState:
    state = _state(nodes, status=status)
    for i, ex in enumerate(state.executions):
        ex.input_tokens, ex.output_tokens, ex.cost_usd = tokens, tokens, 0.01
        ex.started_at, ex.finished_at = 100.0 + i, 100.5 + i
    state.input_tokens = state.output_tokens = tokens * len(nodes)
    state.cost_usd = 0.01 * len(nodes)
    state.started_at, state.finished_at = 100.0, 100.0 + len(nodes)
    return state


@pytest.mark.parametrize("status", ["cancelled", "blocked", "failed"])
def test_steps_a_stopped_variant_never_reached_are_not_reached_and_out_of_the_deltas(
        status: str) -> None:
    base = _costed(["a", "b", "c", "d"], "completed")
    variant = _costed(["a", "b"], status)

    diff = diff_runs(base, variant)

    assert [(s["op"], s.get("not_reached", False)) for s in diff.path["aligned"]] == [
        ("same", False), ("same", False), ("skipped", True), ("skipped", True)]
    assert diff.path["not_reached"] == ["c", "d"]
    assert diff.cost["tokens_delta"] == 0 and diff.cost["usd_delta"] == 0
    assert diff.terminal["wall_clock_delta_ms"] == 0  # base timed up to where c started
    assert set(diff.cost["per_node"]) == {"a", "b"}
    assert "?c → ?d" in format_run_diff(diff)
    assert "2 base step(s) the variant never reached" in format_run_diff(diff)


def test_a_variant_that_went_elsewhere_before_stopping_skipped_the_base_steps() -> None:
    base = _costed(["a", "b", "c"], "completed")
    variant = _costed(["a", "x"], "failed")

    diff = diff_runs(base, variant)

    assert "not_reached" not in diff.path
    assert [s["op"] for s in diff.path["aligned"]] == ["same", "skipped", "skipped", "inserted"]
    assert diff.cost["tokens_delta"] == -20  # b and c were skipped, so they count


def test_a_finished_shorter_variant_skips_and_its_diff_keeps_the_spec_shape() -> None:
    diff = diff_runs(_costed(["a", "b", "c"], "completed"), _costed(["a"], "completed"))
    assert set(diff.wire()["path"]) == {"aligned", "inserted", "skipped"}
    assert diff.cost["tokens_delta"] == -40


def test_a_fork_that_fails_earlier_leaves_the_rest_of_the_base_unreached() -> None:
    from forklab.engine.recording import run_recorded
    from forklab.engine.scenarios import load_scenario

    store = MemoryStore()
    base = run_recorded(load_scenario("flaky-tool"), {"region": "us-west"}, store=store)
    result = fork(base, at="start", change=change.input_patch({"region": "eu-west"}),
                  store=store)

    diff = result.diff
    assert result.state is not None and result.state.status == "failed"
    assert diff.path["not_reached"] == ["summarize"]
    summarize = next(e for e in base.state.executions if e.node == "summarize")
    variant_tokens = result.state.input_tokens + result.state.output_tokens
    base_reached = (base.state.input_tokens + base.state.output_tokens
                    - summarize.input_tokens - summarize.output_tokens)
    assert diff.cost["tokens_delta"] == variant_tokens - base_reached
    assert "summarize" not in diff.cost["per_node"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from("abcd"), min_size=1, max_size=12),
       st.lists(st.sampled_from("abcde"), max_size=12),
       st.sampled_from(["completed", "failed", "blocked", "cancelled"]))
def test_not_reached_steps_are_base_steps_after_everything_the_variant_ran(
        a: list[str], b: list[str], status: str) -> None:
    base, variant = _costed(a, "completed"), _costed(b, status)
    diff = diff_runs(base, variant)
    aligned = diff.path["aligned"]
    flagged = [i for i, s in enumerate(aligned) if s.get("not_reached")]
    if status == "completed":
        assert not flagged
    if flagged:
        assert flagged == list(range(flagged[0], len(aligned)))  # a suffix …
        assert all(s["variant"] is None for s in aligned[flagged[0]:])  # … of base-only steps
    reached_tokens = 20 * (len(a) - len(flagged))
    assert diff.cost["tokens_delta"] == 20 * len(b) - reached_tokens


_SCALARS = (st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2, allow_nan=False)
            | st.sampled_from(["", "a", "é", "1", "true", "null"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
                       max_leaves=6)


@given(_VALUES, _VALUES)
def test_memory_values_are_the_same_exactly_when_their_canonical_json_is(a: Any, b: Any) -> None:
    assert diff_module._same_value(a, b) == (canonical_json(a) == canonical_json(b))
    assert diff_module._same_value(a, a) and diff_module._same_value(b, b)
