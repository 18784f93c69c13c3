"""Decoding an event (``events.from_wire``) builds the object its dataclass ``__init__``
builds, without calling it: for every event type, any subset of its optional payload
fields, and every event of the golden logs; a payload the class cannot take still raises
the ``__init__``'s TypeError."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forklab.engine import actions
from forklab.engine.events import (
    _ENVELOPE,
    EVENT_TYPES,
    Event,
    NodeReused,
    from_stored,
    from_wire,
    node_reused,
)
from forklab.engine.scenarios import SCENARIOS
from tests.engine.golden_tool import load_golden
from tests.engine.test_actions import records

ENVELOPE = {"run_id": "r", "seq": 3, "at": 12.5, "node": "n", "occurrence": 2, "iteration": 1}
VALUES = st.none() | st.integers() | st.text(max_size=5) | st.lists(st.integers(), max_size=3) \
    | st.dictionaries(st.text(max_size=3), st.integers(), max_size=3)


def _payload_fields(cls: type[Event]) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if f.name not in _ENVELOPE]


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _wire(cls: type[Event], payload: dict[str, Any]) -> dict[str, Any]:
    return {**ENVELOPE, "type": cls.TYPE, "v": cls.SCHEMA, "payload": payload}


def _values(cls: type[Event], name: str) -> st.SearchStrategy[Any]:
    """Any JSON-ish value; a ``node.reused`` event's ``actions`` are served records' wire
    forms (listed without seq)."""
    if cls is NodeReused and name == "actions":
        return st.lists(records.map(actions.served_wire), max_size=3)
    return VALUES


def _typed(cls: type[Event], payload: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``__init__`` takes for ``payload``: a ``node.reused`` event's
    records typed, each at the event's seq."""
    if cls is NodeReused and "actions" in payload:
        return {**payload, "actions": tuple(actions.from_wire(a, seq=ENVELOPE["seq"])
                                            for a in payload["actions"])}
    return payload


def _stored(wire: dict[str, Any]) -> Event:
    """``from_stored`` of ``wire`` as a store row holds it: the body without the run id,
    seq, type and time, which come from the row's columns."""
    body = {k: v for k, v in wire.items() if k not in ("run_id", "seq", "type", "at")}
    return from_stored(wire["type"], wire["run_id"], wire["seq"], wire["at"], body)


def _fields(event: Event) -> dict[str, Any]:
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}


@given(data=st.data(), cls=st.sampled_from(sorted(EVENT_TYPES.values(), key=lambda c: c.TYPE)))
def test_a_decoded_event_is_the_one_its_init_builds(data: st.DataObject,
                                                    cls: type[Event]) -> None:
    payload = {}
    for field in _payload_fields(cls):
        if _required(field) or data.draw(st.booleans(), label=field.name):
            payload[field.name] = data.draw(_values(cls, field.name), label=field.name)
    for owned in (False, True):
        decoded = from_wire(_wire(cls, dict(payload)), owned=owned)
        expected = cls(**ENVELOPE, **_typed(cls, payload))  # type: ignore[arg-type]
        assert type(decoded) is cls and decoded == expected
        assert _fields(decoded) == _fields(expected)
    stored = _stored(_wire(cls, dict(payload)))
    assert type(stored) is cls and _fields(stored) == _fields(expected)


def test_defaults_made_by_a_factory_are_fresh_per_event() -> None:
    for cls in EVENT_TYPES.values():
        factories = [f.name for f in _payload_fields(cls)
                     if f.default_factory is not dataclasses.MISSING]
        required = {f.name: None for f in _payload_fields(cls) if _required(f)}
        one, two = (from_wire(_wire(cls, dict(required))) for _ in range(2))
        for name in factories:
            assert getattr(one, name) == getattr(cls(**ENVELOPE, **required), name)
            assert getattr(one, name) is not getattr(two, name), (cls.TYPE, name)


@pytest.mark.parametrize("cls", sorted(EVENT_TYPES.values(), key=lambda c: c.TYPE),
                         ids=lambda c: str(c.TYPE))
def test_a_payload_the_class_cannot_take_raises_what_its_init_raises(
        cls: type[Event]) -> None:
    required = {f.name: None for f in _payload_fields(cls) if _required(f)}
    for decode in (from_wire, _stored):
        with pytest.raises(TypeError, match="unexpected keyword argument 'not_a_field'"):
            decode(_wire(cls, {**required, "not_a_field": 1}))
        with pytest.raises(TypeError, match="multiple values for keyword argument 'node'"):
            decode(_wire(cls, {**required, "node": "x"}))
        for name in required:
            with pytest.raises(TypeError,
                               match=f"missing 1 required keyword-only argument: '{name}'"):
                decode(_wire(cls, {k: v for k, v in required.items() if k != name}))


@pytest.mark.parametrize("cls", sorted(EVENT_TYPES.values(), key=lambda c: c.TYPE),
                         ids=lambda c: str(c.TYPE))
def test_a_whole_payload_takes_the_stored_form_path_and_a_swapped_key_does_not(
        cls: type[Event]) -> None:
    # what a store writes: every payload field (the builder's path without defaults)
    whole = {f.name: [f.name] if cls is not NodeReused or f.name != "actions" else []
             for f in _payload_fields(cls)}
    decoded = from_wire(_wire(cls, dict(whole)))
    assert _fields(decoded) == _fields(cls(**ENVELOPE, **_typed(cls, whole)))  # type: ignore[arg-type]
    # as many keys as fields, one of them foreign: refused as __init__ refuses it
    swapped = {**dict(list(whole.items())[1:]), "not_a_field": 1}
    with pytest.raises(TypeError, match="unexpected keyword argument 'not_a_field'"):
        from_wire(_wire(cls, swapped))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_golden_event_decodes_to_what_its_init_builds(name: str) -> None:
    for wire in load_golden(name)["events"]:
        cls = EVENT_TYPES[wire["type"]]
        expected = cls(run_id=wire["run_id"], seq=wire["seq"], at=from_wire(wire).at,
                       node=wire["node"], occurrence=wire["occurrence"],
                       iteration=wire["iteration"], **wire["payload"])
        assert _fields(from_wire(wire)) == _fields(expected)


@given(data=st.data())
def test_node_reused_builds_what_its_init_builds(data: st.DataObject) -> None:
    payload = {f.name: data.draw(_values(NodeReused, f.name), label=f.name)
               for f in _payload_fields(NodeReused)}
    fields = {**ENVELOPE, **_typed(NodeReused, payload)}

    built = node_reused(**fields)
    expected = NodeReused(**fields)

    assert type(built) is NodeReused and built == expected
    assert all(getattr(built, name) is getattr(expected, name) for name in _fields(expected))


def test_a_stored_row_of_an_unknown_type_or_another_schema_takes_the_wire_path() -> None:
    from forklab.engine.errors import EventGapError

    with pytest.raises(EventGapError, match=r"unknown event type 'no\.such'"):
        from_stored("no.such", "r", 3, 1.0, {"payload": {}})
    cls = EVENT_TYPES["memory.written"]
    wire = _wire(cls, {"key": "k", "value": 1, "tainted": False, "deleted": False})
    older = _stored({**wire, "v": cls.SCHEMA + 1})  # upcast (the identity today), then built
    assert _fields(older) == _fields(from_wire(wire))
