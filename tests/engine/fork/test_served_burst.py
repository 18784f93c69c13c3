"""A fork tail serves consecutive memo hits in one burst (``Runner._serve_burst``).

The burst is a bounded pass that calls nothing, so the collector is paused across it and
on again after; it still stops where the run would: at a cancellation, between two served
nodes.
"""

from __future__ import annotations

import gc

import pytest

from forklab.engine import fork
from forklab.engine import runner as runner_module
from forklab.engine.events import Event
from forklab.engine.runner import CancelToken
from tests.engine.fork.helpers import record

MEMOIZE = {"memoize": True}


def test_served_nodes_are_appended_with_the_collector_paused_and_it_is_on_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_module, "BATCH_MAX", 1)  # each event is appended as made
    base = record("diamond")
    seen: list[tuple[str, bool]] = []

    result = fork(base, at={"before_node": base.state.executions[0].node}, policy=MEMOIZE,
                  on_event=lambda e: seen.append((e.type, gc.isenabled())))

    served = [enabled for type_, enabled in seen if type_ == "node.reused"]
    assert result.state.status == "completed"
    assert len(served) == len(base.state.executions)
    assert not any(served)
    assert [enabled for type_, enabled in seen if type_ == "run.completed"] == [True]
    assert gc.isenabled()


def test_a_cancellation_stops_a_burst_between_two_served_nodes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_module, "BATCH_MAX", 1)
    base = record("diamond")
    cancel = CancelToken()

    def cancel_after_the_first_served(event: Event) -> None:
        if event.type == "node.reused":
            cancel.cancel()

    result = fork(base, at={"before_node": base.state.executions[0].node}, policy=MEMOIZE,
                  on_event=cancel_after_the_first_served, cancel=cancel)

    own = result.state.executions[result.state.prefix_executions:]
    assert result.state.status == "cancelled"
    assert [ex.memo for ex in own] == [True]
    assert gc.isenabled()
