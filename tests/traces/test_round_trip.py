"""``export_run`` → ``read_otlp_json`` → ``map_trace``: the run comes back with the same
nodes, calls, call keys, messages, replies, tool calls and usage (SPEC §8 "Out")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forklab.engine import fork
from forklab.engine.events import (
    AgentRequested,
    AgentResponded,
    AnyEvent,
    NodeReused,
    ToolCalled,
    ToolReturned,
)
from forklab.engine.recording import run_recorded
from forklab.engine.reducers import fold
from forklab.engine.traces import map_trace, read_otlp_json
from forklab.engine.traces.export import EVENT, export_run
from tests.engine.agents.helpers import TICKET, FollowingModel, env_with, support_graph
from tests.engine.fork.helpers import NAMES, record
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import Harness
from tests.traces.test_mapping import workflow

_FIELDS = {
    AgentRequested: ("node", "occurrence", "call", "provider", "model", "system_prompt",
                     "temperature", "messages", "tools"),
    AgentResponded: ("node", "occurrence", "call", "model", "text", "tool_calls",
                     "input_tokens", "output_tokens", "finish_reason"),
    ToolCalled: ("node", "occurrence", "call", "tool", "args", "call_id"),
    ToolReturned: ("node", "occurrence", "call", "result"),
}


def calls(events: list[AnyEvent]) -> list[tuple[Any, ...]]:
    """Every call event as the fields a round trip keeps."""
    return [(e.type, *(getattr(e, f) for f in _FIELDS[type(e)]))
            for e in events if type(e) in _FIELDS]


def round_trip(events: list[AnyEvent]) -> list[AnyEvent]:
    document = json.loads(json.dumps(export_run(events)))  # what a file holds
    spans, rejected = read_otlp_json(document)
    assert not rejected
    imported = map_trace(spans, run_id=events[0].run_id)
    assert not imported.rejected
    return imported.events


def test_a_tool_loop_run_recorded_by_forklab_imports_back_with_equal_calls() -> None:
    recorded = run_recorded(support_graph(), dict(TICKET), env=env_with(FollowingModel()))
    events = recorded.store.read(recorded.run_id)
    back = round_trip(events)
    assert calls(back) == calls(events)
    assert any(type(e) is ToolCalled for e in back)  # the loop did call tools
    original, again = fold(events), fold(back)
    assert [(x.node, x.occurrence, x.status) for x in again.executions] == [
        (x.node, x.occurrence, x.status) for x in original.executions]
    assert [c.call for c in again.calls] == [c.call for c in original.calls]
    assert (again.input_tokens, again.output_tokens) == (original.input_tokens,
                                                         original.output_tokens)
    assert again.status == original.status


def test_an_imported_run_exports_and_imports_back_into_an_equal_run() -> None:
    events = map_trace(workflow(), run_id="r").events
    back = round_trip(events)
    assert calls(back) == calls(events)
    assert fold(back).memory == fold(events).memory
    assert fold(back).label == fold(events).label
    assert round_trip(back) == back  # a fixed point from the first trip on


# -- forks: nodes served whole from a recording (node.reused) ------------------------------

_BASES: dict[str, Any] = {}


def _base(name: str) -> Any:
    if name not in _BASES:
        _BASES[name] = record(name)
    return _BASES[name]


def _trip(events: list[AnyEvent], recording: Any = None) -> list[AnyEvent]:
    document = json.loads(json.dumps(export_run(events, recording=recording)))
    spans, rejected = read_otlp_json(document)
    assert not rejected
    return map_trace(spans, run_id=events[0].run_id).events


def _executions(events: list[AnyEvent]) -> list[tuple[str, int]]:
    return [(x.node, x.occurrence) for x in fold(events).executions]


def _by_execution(events: list[AnyEvent], renumber: dict[tuple[str, int], tuple[str, int]]
                  ) -> list[tuple[Any, ...]]:
    """The calls of the executions ``renumber`` names, as those executions (node,
    occurrence) — an imported trace numbers occurrences from its first span."""
    out = []
    for call in calls(events):
        where = renumber.get((call[1], call[2]))
        if where is not None:
            out.append((call[0], *where, *call[3:]))
    return out


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(NAMES), point=st.integers(0, 30))
def test_a_memoized_fork_exports_its_served_nodes_with_their_recorded_calls(
        name: str, point: int) -> None:
    """A null fork with memoize on serves its tail from the base's recording; its export
    carries each served node's calls (requests from the recording), so it imports back
    into the calls the base's own export imports into, execution by execution."""
    base = _base(name)
    executions = base.state.executions
    at = executions[point % len(executions)].node
    forked = fork(base, at={"before_node": at}, policy={"memoize": True})
    assert forked.run_id is not None and forked.state is not None
    events = forked.store.read(forked.run_id)
    assert any(isinstance(e, NodeReused) for e in events) or forked.state.status != "completed"
    back = _trip(events, forked.store.read)
    tail = fold(events).executions[fold(events).prefix_executions:]
    mine = dict(zip(_executions(back), [(x.node, x.occurrence) for x in tail], strict=True))
    theirs = {(x.node, x.occurrence): (x.node, x.occurrence) for x in tail}
    base_back = _trip(base.store.read(base.run_id))
    base_numbers = dict(zip([(x.node, x.occurrence) for x in executions],
                            _executions(base_back), strict=True))
    expected = _by_execution(base_back, {base_numbers[k]: v for k, v in theirs.items()})
    assert _by_execution(back, mine) == expected
    if point % len(executions) == 0:  # forked at its start: the whole run comes back
        assert calls(back) == calls(base_back)


def test_without_its_base_a_served_node_is_exported_without_calls() -> None:
    base = _base("research-write")
    forked = fork(base, at={"before_node": base.state.executions[0].node},
                  policy={"memoize": True})
    assert forked.run_id is not None
    events = forked.store.read(forked.run_id)
    assert calls(_trip(events)) == []  # no recording to read the calls from
    served = [e for e in _trip(events, forked.store.read) if type(e) is AgentRequested]
    assert [e.messages for e in served] == [
        e.messages for e in base.store.read(base.run_id) if type(e) is AgentRequested]


# -- every demo scenario and generated graphs: a primary run comes back equal -------------


def _primary_trip(events: list[AnyEvent]) -> None:
    """``events`` (a primary run's log) exported and imported back is an *equal run*:

    - the same executions, in order: (node, occurrence, status);
    - the same calls, in log order, with the same stored keys and the same request and
      response fields (``_FIELDS``: model turns, a tool node's own tool call, the tool calls
      a model asked for, parallel ones interleaved as recorded, a panel's role instances);
    - the same entries in the fold's ``calls``: kind, full call key, node, role and index
      (model and tool failures, human gate decisions and subgraph outcomes included);
    - the same token totals.

    Not kept, because no span carries them: memory and state values (an imported node
    writes its last reply under its own id), the graph (the import's is synthetic), routing
    decisions, ids (seq numbering gains ``trace.imported``), times (nanosecond-shifted to
    keep span order), latencies, costs (re-priced by the price table) and labels (an
    imported call is ``live``)."""
    back = round_trip(events)
    original, again = fold(events), fold(back)
    assert [(x.node, x.occurrence, x.status) for x in again.executions] == [
        (x.node, x.occurrence, x.status) for x in original.executions]
    assert calls(back) == calls(events)
    assert [(c.kind, c.call, c.node, c.role, c.index) for c in again.calls] == [
        (c.kind, c.call, c.node, c.role, c.index) for c in original.calls]
    assert (again.input_tokens, again.output_tokens) == (original.input_tokens,
                                                         original.output_tokens)


@pytest.mark.parametrize("name", NAMES)
def test_every_demo_scenarios_run_exports_and_imports_back_into_an_equal_run(name: str
                                                                             ) -> None:
    base = _base(name)
    _primary_trip(base.store.read(base.run_id))


@examples(25)
@given(case=graph_cases())
def test_a_generated_graphs_run_exports_and_imports_back_into_an_equal_run(case: Any
                                                                           ) -> None:
    base = record_case(case, Harness())
    _primary_trip(base.store.read(base.run_id))


def test_a_forklab_event_attribute_rebuilds_only_a_gates_or_subgraphs_events() -> None:
    """``forklab.event`` names the events it rebuilds: any other type (a trace claiming a
    fork, say) is rejected with its span, never appended to the imported run."""
    base = _base("order-fulfilment")
    document = json.loads(json.dumps(export_run(base.store.read(base.run_id))))
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    gate = next(s for s in spans if s["name"].startswith("human "))
    for attribute in gate["attributes"]:
        if attribute["key"] == EVENT:
            attribute["value"] = {"stringValue": json.dumps(
                {"type": "run.forked", "payload": {"base_run_id": "x"}})}
    read, _ = read_otlp_json(document)
    imported = map_trace(read, run_id="r")
    assert [(r.name, r.reason) for r in imported.rejected] == [
        (gate["name"], "a forklab.event that is not a human gate's or subgraph's event")]
    assert not any(e.type.startswith(("human.", "run.forked")) for e in imported.events)
