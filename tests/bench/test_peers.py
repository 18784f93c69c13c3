"""The peer comparison harness (bench/peers) runs, measures what it says, and checks itself.

No timing is asserted (timings belong to the benchmark). What is asserted: the command runs
end to end at a tiny N, every system makes exactly the model calls its fork semantics imply,
and the harness's own checks can fail. The forklab part needs nothing beyond forklab, so it
always runs; each peer's test is skipped cleanly when the ``bench`` extra that installs it
is absent (CI installs ``[dev,scale]``).
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from bench.peers import run
from bench.peers.outcome import Outcome, load_meta
from bench.peers.sizes import store_bytes
from bench.peers.worker import runners
from bench.peers.workloads import FORK_LAST, NULL_FORK

N = 4

# calls each fork makes on each system at N nodes: (null fork at N/2, before the last, worker 0)
EXPECTED_FORK_CALLS = {
    "forklab": (0, 1, 2),           # memoized tail: only the changed node and what reads it
    "activegraph": (0, 1, 2),       # replay_llm_cache serves every unchanged prompt
    "langgraph": (N - N // 2, 1, N + 1),  # time travel re-executes every node after the point
    "langgraph-cache": (0, 1, 2),   # ... unless the node cache holds its key
}


def system_param(system: str) -> object:
    reason = f"{system} is not installed (pip install -e '.[bench]')"
    skip = pytest.mark.skipif(not run.installed(system), reason=reason)
    return pytest.param(system, marks=skip, id=system)


SYSTEMS = [system_param(s) for s in EXPECTED_FORK_CALLS]


def record_then_fork(system: str, shape: str, kind: str, tmp_path: Path,
                     latency_ms: float = 0.0) -> tuple[Outcome, Outcome]:
    record, fork = runners(system)
    base = tmp_path / "base"
    base.mkdir()
    recorded = record(shape, N, latency_ms, base)
    copy = tmp_path / kind
    shutil.copytree(base, copy)
    return recorded, fork(kind, N, latency_ms, copy)


def test_the_peer_command_prints_both_tables_for_forklab_at_a_tiny_n(
        capsys: pytest.CaptureFixture[str]) -> None:
    status = run.main(["--n", "5", "--repeat", "1", "--only", "forklab",
                       "--fanout-latency-ms", "0"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "| null fork at N/2 of a chain, 0 ms | " in out
    assert "| store added by one fork before the last node | " in out
    assert "0 calls" in out.split("null fork at N/2")[1].splitlines()[0]
    assert "2 calls" in out.split("change worker 0")[1].splitlines()[0]
    assert "✗" not in out and "failed" not in out


@pytest.mark.parametrize("system", SYSTEMS)
def test_a_recording_calls_the_model_once_per_agent_node(system: str, tmp_path: Path) -> None:
    record, _ = runners(system)
    (tmp_path / "chain").mkdir()
    (tmp_path / "fanout").mkdir()
    assert record("chain", N, 0.0, tmp_path / "chain").calls == N
    assert record("fanout", N, 0.0, tmp_path / "fanout").calls == N + 1  # workers + join


@pytest.mark.parametrize("system", SYSTEMS)
def test_a_null_fork_reproduces_the_base_with_the_calls_its_system_makes(
        system: str, tmp_path: Path) -> None:
    recorded, forked = record_then_fork(system, "chain", "null", tmp_path)
    assert forked.final == recorded.final
    assert forked.calls == EXPECTED_FORK_CALLS[system][0]


@pytest.mark.parametrize("system", SYSTEMS)
def test_changing_the_last_prompt_reruns_only_the_last_node(system: str,
                                                            tmp_path: Path) -> None:
    recorded, forked = record_then_fork(system, "chain", "last", tmp_path)
    assert forked.final != recorded.final
    assert forked.calls == EXPECTED_FORK_CALLS[system][1]


@pytest.mark.parametrize("system", SYSTEMS)
def test_changing_worker_0_reaches_the_join(system: str, tmp_path: Path) -> None:
    recorded, forked = record_then_fork(system, "fanout", "worker0", tmp_path)
    assert forked.final != recorded.final  # the join really read worker 0's new answer
    assert forked.calls == EXPECTED_FORK_CALLS[system][2]


def test_the_harness_flags_a_null_fork_that_changed_the_answer() -> None:
    outcome = Outcome(seconds=0.1, calls=0, final="something else")
    assert run.check(NULL_FORK, outcome, "the base's answer", N)
    assert not run.check(NULL_FORK, Outcome(0.1, 0, "same"), "same", N)


def test_the_harness_flags_a_changed_fork_that_changed_nothing() -> None:
    assert run.check(FORK_LAST, Outcome(seconds=0.1, calls=1, final="same"), "same", N)


def test_a_recording_leaves_its_run_id_and_final_answer_for_its_forks(tmp_path: Path) -> None:
    record, _ = runners("forklab")
    outcome = record("chain", N, 0.0, tmp_path)
    meta = load_meta(tmp_path)
    assert meta["final"] == outcome.final and meta["run_id"]


def test_store_size_includes_writes_still_in_the_write_ahead_log(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "db.sqlite3")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (body TEXT)")
    empty = store_bytes(tmp_path)
    conn.executemany("INSERT INTO t VALUES (?)", [("x" * 1000,)] * 200)
    conn.commit()  # still open: the rows sit in db.sqlite3-wal until a checkpoint
    assert store_bytes(tmp_path) >= empty + 200_000
    assert not (tmp_path / "db.sqlite3-wal").exists() or \
        (tmp_path / "db.sqlite3-wal").stat().st_size == 0
    conn.close()


def test_a_peer_that_is_not_installed_is_refused_up_front_with_the_install_command(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(run, "installed", lambda system: system == "forklab")
    with pytest.raises(SystemExit) as refused:
        run.main(["--only", "forklab", "activegraph"])
    assert refused.value.code == 2
    assert "activegraph not installed: .venv/bin/pip install -e '.[bench]'" in \
        capsys.readouterr().err


def test_a_peer_counts_as_installed_only_when_every_module_it_imports_is_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "PEER_MODULES", {
        "present": ("json", "sqlite3"),
        "namespace-only": ("json", "json.no_such_submodule"),  # a parent without the module
        "absent": ("no_such_package_for_forklab.graph",)})
    assert run.installed("present") and run.installed("forklab")
    assert not run.installed("namespace-only")
    assert not run.installed("absent")
