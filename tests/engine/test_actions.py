"""Typed action records (``forklab.engine.actions``): one wire form, shared when copied.

- every record kind round-trips through its wire form, and the wire form lists ``type``,
  ``seq`` and the fields in the order the folded state's dicts always had (snapshots and
  ``run.forked`` prefixes read the same);
- a ``node.reused`` event keeps its wire payload (records without ``seq``) and reads back
  with each record at the event's seq;
- malformed wire records are refused with a message naming what was expected;
- copying a state shares its records (they are immutable).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forklab.engine import actions
from forklab.engine.actions import (
    ACTION_TYPES,
    Action,
    AgentAnswer,
    AgentAsked,
    ChildOutcome,
    RouteTaken,
    ToolResult,
)
from forklab.engine.events import Event, NodeReused, RunStarted, from_wire
from forklab.engine.reducers import fold
from forklab.engine.state import Execution

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8)

_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "seq": st.integers(1, 10**6), "request_hash": st.text(max_size=8),
    "role": st.none() | st.text(max_size=5), "index": st.none() | st.integers(0, 9),
    "text": st.text(max_size=20), "model": st.text(max_size=8),
    "input_tokens": st.integers(0, 10**5), "output_tokens": st.integers(0, 10**5),
    "cost_usd": st.none() | st.floats(0, 10, allow_nan=False),
    "latency_ms": st.floats(0, 10**4, allow_nan=False),
    "label": st.sampled_from(["live", "changed", "reused", "simulated"]),
    "args_hash": st.text(max_size=8), "args": st.dictionaries(st.text(max_size=5), _json),
    "tool": st.text(max_size=8), "result": _json, "kind": st.sampled_from(["agent", "tool"]),
    "error": st.dictionaries(st.text(max_size=5), _json), "to": st.text(max_size=8),
    "reason": st.text(max_size=8), "decision": st.sampled_from(["approved", "rejected"]),
    "data": _json, "memory_updates": st.dictionaries(st.text(max_size=5), _json),
    "child_run_id": st.text(max_size=8), "status": st.sampled_from(["completed", "failed"]),
    "output": st.dictionaries(st.text(max_size=5), _json),
    "tainted": st.lists(st.text(max_size=5), max_size=3).map(tuple),
    "call": st.none() | st.sampled_from(["turn:1", "turn:2/tool:1", "judge/turn:3"]),
    "call_id": st.none() | st.text(max_size=8),
    "effect": st.none() | st.sampled_from(["read", "write"]),
    "trusted": st.none() | st.booleans(),
    "tool_calls": st.none() | st.lists(st.fixed_dictionaries({
        "id": st.text(max_size=5), "name": st.text(max_size=5), "arguments": _json}),
        max_size=2).map(tuple),
    "finish_reason": st.none() | st.sampled_from(["stop", "tool_calls"]),
}


def _record_of(cls: type[Action]) -> st.SearchStrategy[Action]:
    fields = {f.name: _VALUES[f.name] for f in dataclasses.fields(cls)}
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


records = st.sampled_from(sorted(ACTION_TYPES.values(), key=lambda c: c.TYPE)).flatmap(
    _record_of)


@given(records)
def test_every_record_reads_back_from_its_wire_form(record: Action) -> None:
    assert actions.from_wire(actions.to_wire(record)) == record


@given(records)
def test_a_wire_form_lists_type_seq_then_the_fields_in_declaration_order(
        record: Action) -> None:
    wire = actions.to_wire(record)

    assert list(wire) == ["type", "seq", *(
        f.name for f in dataclasses.fields(record) if f.name != "seq"
        # fields added later are absent while unset (a record without them reads as before)
        and not (f.name in ("effect", "trusted") and getattr(record, f.name) is None))]
    assert wire["type"] == record.TYPE
    served = actions.served_wire(record)
    assert served == {k: v for k, v in wire.items() if k != "seq"}
    assert list(served) == [k for k in wire if k != "seq"]  # the stored text's key order


@given(st.lists(records, max_size=4), st.integers(1, 10**6))
def test_node_reused_keeps_its_wire_payload_and_reads_back_at_its_seq(
        served: list[Action], seq: int) -> None:
    at_seq = tuple(dataclasses.replace(r, seq=seq) for r in served)
    event = NodeReused(run_id="r", seq=seq, node="n", occurrence=1, iteration=1, kind="agent",
                       fingerprint="fp", reads={}, actions=at_seq, writes={}, deletes=[],
                       tainted=[], next=[])

    wire = event.to_wire()

    assert wire["payload"]["actions"] == [actions.served_wire(r) for r in served]
    assert all("seq" not in a for a in wire["payload"]["actions"])
    assert from_wire(wire) == event


def test_an_unknown_record_type_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown action record type 'agent_reply'.*"
                                         r"agent_result"):
        actions.from_wire({"type": "agent_reply", "seq": 1})


def test_a_record_missing_a_field_is_refused() -> None:
    with pytest.raises(ValueError, match="malformed 'tool_result' action record"):
        actions.from_wire({"type": "tool_result", "seq": 1, "label": "live"})


def test_a_child_outcome_stored_before_totals_and_taint_reads_with_their_defaults() -> None:
    record = actions.from_wire({"type": "subgraph_result", "seq": 4, "child_run_id": "c",
                                "status": "completed", "output": {}, "label": "live"})

    assert record == ChildOutcome(seq=4, child_run_id="c", status="completed", output={},
                                  label="live")
    assert actions.to_wire(record)["tainted"] == []


def test_copying_a_state_shares_its_records() -> None:
    answer = AgentAnswer(seq=3, request_hash="h", text="t", role=None, index=None, model="m",
                         input_tokens=1, output_tokens=2, cost_usd=None, latency_ms=0.0,
                         label="live")
    execution = Execution(node="n", kind="agent", occurrence=1, iteration=1, start_seq=2,
                          fingerprint="fp", reads={}, started_at=0.0,
                          actions=[answer, ToolResult(seq=4, result={"x": [1]}, label="live"),
                                   RouteTaken(seq=5, to="m", reason="r", label="live")])

    copied = copy.deepcopy(execution)

    assert copied.actions == execution.actions
    assert all(a is b for a, b in zip(copied.actions, execution.actions, strict=True))
    assert Execution.from_wire(execution.to_wire()) == execution


def test_the_fold_gives_a_served_node_the_event_s_records_themselves() -> None:
    served = (AgentAnswer(seq=2, request_hash="h", text="t", role=None, index=None, model="m",
                          input_tokens=1, output_tokens=2, cost_usd=0.5, latency_ms=0.0,
                          label="reused"),)
    events = [
        RunStarted(run_id="r", seq=1, graph_id="g", graph_version=1, graph_hash="x",
                   input={}, start="n"),
        NodeReused(run_id="r", seq=2, node="n", occurrence=1, iteration=1, kind="agent",
                   fingerprint="fp", reads={}, actions=served, writes={"k": 1}, deletes=[],
                   tainted=[], next=[]),
    ]

    state = fold(events)

    assert state.executions[0].actions[0] is served[0]
    assert (state.input_tokens, state.output_tokens, state.cost_usd) == (1, 2, 0.5)
    assert [c.label for c in state.calls] == ["reused"]


@given(st.data(), records)
def test_replaced_is_what_dataclasses_replace_makes(data: st.DataObject,
                                                    record: Action) -> None:
    names = [f.name for f in dataclasses.fields(record)]
    changed = data.draw(st.lists(st.sampled_from(names), unique=True), label="changed")
    changes = {name: data.draw(_VALUES[name], label=name) for name in changed}

    made = actions.replaced(record, **changes)
    expected = dataclasses.replace(record, **changes)

    assert type(made) is type(expected) and made == expected
    assert all(getattr(made, name) is getattr(expected, name) for name in names)


@given(_record_of(AgentAnswer), st.integers(1, 10**6))
def test_a_served_answer_is_the_replaced_record(record: AgentAnswer, seq: int) -> None:
    made = actions.served_answer(record, seq)
    expected = actions.replaced(record, seq=seq, latency_ms=0.0, label="reused")

    assert type(made) is AgentAnswer and made == expected
    assert all(getattr(made, f.name) is getattr(record, f.name)  # copied, not rebuilt
               for f in dataclasses.fields(AgentAnswer)
               if f.name not in ("seq", "latency_ms", "label"))


@given(st.lists(records, max_size=4), st.integers(1, 10**6))
def test_a_node_reused_payload_is_the_general_payload_in_its_order(
        served: list[Action], seq: int) -> None:
    event = NodeReused(run_id="r", seq=seq, node="n", occurrence=1, iteration=1, kind="agent",
                       fingerprint="fp", reads={"a": 1}, actions=tuple(served),
                       writes={"k": [1]}, deletes=["d"], tainted=["k"], next=["m"],
                       waiting=["j"])
    general = Event.payload(event)
    general["actions"] = [actions.served_wire(r) for r in served]

    payload = event.payload()

    assert payload == general and list(payload) == list(general)


def test_replaced_refuses_a_change_naming_no_field() -> None:
    record = ToolResult(seq=1, result=None, label="live")
    with pytest.raises(TypeError, match="no field"):
        actions.replaced(record, seq=2, latency_ms=0.0)


@given(_record_of(AgentAnswer))
def test_an_answer_built_in_a_straight_line_is_the_dataclass_s(record: AgentAnswer) -> None:
    made = actions.answered(*(getattr(record, f.name) for f in dataclasses.fields(record)))
    assert type(made) is AgentAnswer and made == record
    assert all(getattr(made, f.name) is getattr(record, f.name)
               for f in dataclasses.fields(AgentAnswer))


@given(_record_of(AgentAsked))
def test_a_request_built_in_a_straight_line_is_the_dataclass_s(record: AgentAsked) -> None:
    made = actions.asked(record.seq, record.request_hash, record.role, record.index,
                         record.call)
    assert type(made) is AgentAsked and made == record
