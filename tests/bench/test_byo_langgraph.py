"""bench/bench_byo_langgraph.py runs at its smallest size, and its checks can fail.

No timing is asserted (timings belong to the benchmark). What is asserted: the command runs
end to end on the loopback stub, each system makes the calls its fork semantics imply
(LangGraph's time travel runs the tail's tools again, refund included; forklab's fork serves
them), and the check that both forks sent the same requests flags a pair that did not.
Skipped without LangGraph and langchain-openai (the ``bench`` extra).
"""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from bench import bench_byo_langgraph as bench


def row(out: str, turn: str, change: str) -> list[str]:
    line = next(line for line in out.splitlines()
                if line.startswith(f"| {turn} | {bench.KIND_LABELS[change]} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_smallest_run_prints_its_tables_and_its_checks_hold(
        capsys: pytest.CaptureFixture[str]) -> None:
    status = bench.main(["--quick", "--model-ms", "0", "--tool-ms", "0"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "✗" not in out
    assert "| 0 ms | 6 / 4 |" in out  # 2 tickets: 6 requests, 2 lookups + 2 refunds, each
    # turn 2 of 6, the first ticket's lookup replaced: both pay turns 2-6 (5 requests);
    # LangGraph runs the tail's lookup and both refunds again, forklab none
    cells = row(out, "2 of 6", "lookup")
    assert cells[2:5] == ["5 / 5", "0 + 0 / 1 + 2", "0 / 2"]
    # a refund the base never made: forklab's guard blocks it, LangGraph pays it
    assert row(out, "2 of 6", "new write")[4] == "0: blocked / 2 (99.0 among them)"
    # no change: a null fork makes no call, a replay re-runs the tail
    assert row(out, "5 of 6", "none")[2:5] == ["0 / 2", "0 + 0 / 0 + 1", "0 / 1"]


def test_the_check_flags_forks_that_did_not_make_the_same_change() -> None:
    base = bench.Sample(requests=3, lookups=1, refunds=[10.5], answer="done",
                        bodies=[{"turn": 1}, {"turn": 2}, {"turn": 3}])
    figures = bench.Figures(record={"forklab": base, "LangGraph": base})
    for kind in bench.KINDS:
        same = bench.Sample(answer="a", bodies=[{"turn": 2}], status="completed")
        figures.forks[(kind, 2, "forklab")] = same
        figures.forks[(kind, 2, "LangGraph")] = same
    figures.forks[("reply", 2, "LangGraph")] = bench.Sample(answer="a", bodies=[{"turn": 9}])
    failures = bench.check(figures, tickets=1)
    assert any("reply replaced" in f and "different requests" in f for f in failures)
    assert not any("lookup result replaced" in f for f in failures)


def test_the_profile_splits_a_null_forks_time_by_package(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--profile", "--tickets", "1"]) == 0
    out = capsys.readouterr().out
    assert "| forklab | " in out and "| openai | " in out and "| langgraph | " in out
