"""``export_run`` → ``read_otlp_json`` → ``map_trace``: the run comes back with the same
nodes, calls, call keys, messages, replies, tool calls and usage (SPEC §8 "Out")."""

from __future__ import annotations

import json
from typing import Any

from forklab.engine.events import (
    AgentRequested,
    AgentResponded,
    AnyEvent,
    ToolCalled,
    ToolReturned,
)
from forklab.engine.recording import run_recorded
from forklab.engine.reducers import fold
from forklab.engine.traces import map_trace, read_otlp_json
from forklab.engine.traces.export import export_run
from tests.engine.agents.helpers import TICKET, FollowingModel, env_with, support_graph
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
