"""A run whose process is really killed (SIGKILL) is rebuilt from its log and resumed.

What the tests prove, for a kill between two nodes and a kill inside a node:
- every event the killed process had appended is still in the log, unchanged;
- ``resume_run`` finishes the run from the last node boundary, and its final memory equals
  an uninterrupted recording of the same scenario (the scripted provider is deterministic);
- a node the process died inside is marked ``node.interrupted`` and re-executed, and the
  model calls its first attempt had recorded are served back (label ``reused``), not paid
  for again;
- folding the whole log gives exactly the state the resumed runner ended with.

The child (``tests/engine/crash_child.py``) signals readiness with a marker file written
after the chosen event is committed; the parent polls for it with a deadline, never a
fixed sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from forklab.engine.canonical import canonical_equals
from forklab.engine.fork.continuing import resume_run
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.reducers import fold
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.sqlite_store import SqliteStore
from forklab.engine.store import MemoryStore

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER_DEADLINE_S = 60.0


def kill_child_at(tmp_path: Path, scenario: str, stop: str) -> tuple[Path, list[dict[str, Any]]]:
    """Record ``scenario`` in a child process, SIGKILL it at ``stop``; return db and its events."""
    db, marker = tmp_path / "runs.sqlite3", tmp_path / "frozen.json"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.engine.crash_child", str(db), "crashed", scenario, stop,
         str(marker)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + MARKER_DEADLINE_S
        while not marker.exists():
            if child.poll() is not None:
                pytest.fail(f"child exited {child.returncode} before {stop}: "
                            f"{child.communicate()[1]}")
            if time.monotonic() > deadline:
                pytest.fail(f"child never reached {stop} within {MARKER_DEADLINE_S}s")
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()
    assert child.returncode == -signal.SIGKILL
    return db, json.loads(marker.read_text())


def uninterrupted(scenario: str) -> RecordedRun:
    return run_recorded(SCENARIOS[scenario].graph(), SCENARIOS[scenario].input,
                        store=MemoryStore())


def resume(db: Path, appended: list[dict[str, Any]]) -> tuple[SqliteStore, RecordedRun]:
    """Check the killed log is intact, then resume it in this process."""
    store = SqliteStore(db)
    assert [e.to_wire() for e in store.read("crashed")] == appended
    resumed = resume_run("crashed", store=store)
    assert [e.to_wire() for e in store.read("crashed", upto=len(appended))] == appended
    return store, resumed


def assert_finished_like_an_uninterrupted_run(store: SqliteStore, resumed: RecordedRun,
                                              scenario: str) -> None:
    reference = uninterrupted(scenario)
    assert resumed.state.status == "completed"
    assert canonical_equals(resumed.memory, reference.memory)
    assert [(p["node"], p["occurrence"]) for p in resumed.state.path()] == [
        (p["node"], p["occurrence"]) for p in reference.state.path()]
    assert canonical_equals(fold(store.read("crashed")).to_wire(), resumed.state.to_wire())


def test_a_run_killed_between_nodes_resumes_at_the_next_node(tmp_path: Path) -> None:
    db, appended = kill_child_at(tmp_path, "review-loop", "node.completed:review:1")
    assert appended[-1]["type"] == "node.completed"

    store, resumed = resume(db, appended)

    tail = store.read("crashed", after=len(appended))
    assert tail[0].type == "node.started" and tail[0].node == "gate"
    assert "node.interrupted" not in {e.type for e in store.read("crashed")}
    assert all(call.label == "live" for call in resumed.state.calls)
    assert_finished_like_an_uninterrupted_run(store, resumed, "review-loop")
    store.close()


@pytest.mark.parametrize("answered", [1, 3])
def test_a_run_killed_inside_a_node_reruns_it_reusing_the_calls_already_made(
    tmp_path: Path, answered: int
) -> None:
    db, appended = kill_child_at(tmp_path, "panel-vote", f"agent.responded:vote:{answered}")

    store, resumed = resume(db, appended)

    tail = store.read("crashed", after=len(appended))
    assert tail[0].type == "node.interrupted" and tail[0].node == "vote"
    rerun = [e for e in tail if e.type == "agent.responded" and e.node == "vote"]
    assert [e.label for e in rerun] == ["reused"] * answered + ["live"] * (4 - answered)
    paid_before = [e for e in store.read("crashed", upto=len(appended))
                   if e.type == "agent.responded"]
    assert [(e.role, e.index, e.text) for e in paid_before] == [
        (e.role, e.index, e.text) for e in rerun[:answered]]
    assert resumed.state.interrupted[0].node == "vote"
    assert_finished_like_an_uninterrupted_run(store, resumed, "panel-vote")
    store.close()


def test_a_resumed_run_pays_for_each_model_call_once(tmp_path: Path) -> None:
    db, appended = kill_child_at(tmp_path, "panel-vote", "agent.responded:vote:2")

    store, resumed = resume(db, appended)

    reference = uninterrupted("panel-vote")
    # Across the whole log (the killed attempt included) each call was paid exactly once ...
    paid = [e for e in store.read(resumed.run_id)
            if e.type == "agent.responded" and e.label == "live"]
    assert len(paid) == len(reference.state.calls)
    assert sum(e.cost_usd or 0.0 for e in paid) == pytest.approx(reference.state.cost_usd)
    # ... and the folded totals count each call once, as if nothing had been interrupted.
    assert len(resumed.state.calls) == len(reference.state.calls)
    assert resumed.state.cost_usd == pytest.approx(reference.state.cost_usd)
    assert resumed.state.input_tokens == reference.state.input_tokens
    store.close()
