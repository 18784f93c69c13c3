"""A live fork's ``run.forked`` defers its prefix's wire form (``PREFIX_FROM_STATE``): read,
it is the prefix state's wire form, exactly; a store keeping the prefix by reference never
makes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forklab.engine import change, fork, fork_points
from forklab.engine.canonical import canonical_equals
from forklab.engine.events import PREFIX_FROM_STATE, RunForked
from forklab.engine.sqlite_store import SqliteStore
from forklab.engine.store import MemoryStore
from tests.engine.fork.helpers import NAMES, record

RECORDED = {name: record(name) for name in NAMES}
_SLOT: Any = RunForked.__dict__["prefix_state"].slot  # the value stored, read as it is


def _forked(prefix: Any, prefix_state: dict[str, Any]) -> RunForked:
    return RunForked(run_id="f", seq=2, base_run_id="b", fork_sequence_id=prefix.version,
                     fork_node_id=None, prefix_state=prefix_state, prefix=prefix, changes=[],
                     graph={}, prefix_ref={"run_id": prefix.run_id, "seq": prefix.version})


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_deferred_prefix_reads_as_the_wire_form_made_when_the_event_was(data) -> None:
    base = RECORDED[data.draw(st.sampled_from(NAMES), label="scenario")]
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    prefix = fork(base, at={"sequence": point.seq}, dry_run=True).prefix_state
    eager, deferred = _forked(prefix, prefix.to_wire()), _forked(prefix, PREFIX_FROM_STATE)

    assert _SLOT.__get__(deferred) is PREFIX_FROM_STATE  # not made yet
    assert deferred.prefix_names() == eager.prefix_names() == (
        eager.prefix_state["run_id"], eager.prefix_state["version"])
    assert canonical_equals(deferred.to_wire(), eager.to_wire())
    assert deferred == eager
    assert _SLOT.__get__(deferred) is deferred.prefix_state  # made once, then kept


def test_a_deferred_prefix_without_its_state_is_refused() -> None:
    event = RunForked(run_id="f", seq=2, base_run_id="b", fork_sequence_id=1,
                      fork_node_id=None, prefix_state=PREFIX_FROM_STATE, changes=[], graph={})
    try:
        event.prefix_state  # noqa: B018
    except TypeError:
        return
    raise AssertionError("a deferred prefix_state without a prefix read as something")


def test_a_fork_kept_by_reference_never_makes_its_prefix_wire_form(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite3")
    try:
        base = record("diamond", store=store)
        last = base.state.executions[-1].node
        made: list[RunForked] = []
        result = fork(base, at={"before_node": last}, change=change.prompt(last, "Again."),
                      on_event=lambda e: made.append(e) if isinstance(e, RunForked) else None)
        (forked,) = made
        assert _SLOT.__get__(forked) is PREFIX_FROM_STATE  # stored by reference, unread
        memory = MemoryStore()
        memory.append(result.run_id, store.read(result.run_id), expected_seq=0)
        assert canonical_equals(memory.read(result.run_id)[1].to_wire()["payload"][
            "prefix_state"], forked.prefix_state)
    finally:
        store.close()
