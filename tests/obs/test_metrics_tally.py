"""``forklab.runs.metrics``: one append's observations are summed per series before they are
applied (``Tally``), and that changes every Prometheus series exactly as observing its events
one at a time does — for recorded runs and memoized fork tails of generated graphs, served
(``node.reused``) nodes included. Counts are checked against the log too: every node
execution and every model call of the appended events is counted once."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from forklab.engine import fork, fork_points
from forklab.engine.actions import AgentAnswer
from forklab.engine.events import AgentResponded, NodeCompleted, NodeFailed, NodeReused
from forklab.runs import metrics
from tests.engine.properties.changes import changes
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import Harness, hitl


def series() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every forklab sample in the default registry, by name and labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in REGISTRY.collect() if family.name.startswith("forklab_")
            for s in family.samples if not s.name.endswith("_created")}


def delta(before: dict[Any, float], after: dict[Any, float]) -> dict[Any, float]:
    return {k: round(v - before.get(k, 0.0), 9) for k, v in after.items()
            if round(v - before.get(k, 0.0), 9)}


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_a_tally_applies_what_its_events_one_by_one_would(case: Any,
                                                          data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    result = fork(base, at={"sequence": point.seq}, change=item, hitl=hitl, ignore_budget=True,
                  policy={"memoize": True})

    for run_id, state in ((base.run_id, base.state), (result.run_id, result.state)):
        events = base.store.read(run_id)
        tally = metrics.observations(events, state)
        nodes = sum(isinstance(e, NodeCompleted | NodeFailed | NodeReused) for e in events)
        calls = sum(isinstance(e, AgentResponded) for e in events) + sum(
            isinstance(a, AgentAnswer) for e in events if isinstance(e, NodeReused)
            for a in e.actions)
        assert sum(n for (metric, _), n in tally.counts.items()
                   if metric is metrics.NODES) == nodes
        assert sum(n for (metric, _), n in tally.counts.items()
                   if metric is metrics.MODEL_CALLS) == calls

        start = series()
        tally.apply()
        together = delta(start, series())
        middle = series()
        for event in events:
            metrics.observations([event], state).apply()
        assert delta(middle, series()) == together
