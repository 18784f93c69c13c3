"""A state's private copy (``state._private``, what ``RunState.from_wire`` and
``Execution.from_wire`` copy with) is exactly what a JSON round trip through the json module
returns — types, key order, NaN and infinities included — whether orjson or the json module
made it, and it raises where that round trip raises."""

from __future__ import annotations

import enum
import json
import math
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forklab.engine.canonical import loads
from forklab.engine.state import RunState, _private


class Colour(enum.StrEnum):
    RED = "red"


class Plain(enum.Enum):
    ONE = "one"


SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats() | st.text() | st.just(Colour.RED)
           | st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
                     min_size=1, max_size=2))
KEYS = st.text(max_size=4) | st.integers(-3, 3)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.tuples(inner, inner)
                      | st.dictionaries(KEYS, inner, max_size=4), max_leaves=20)


def _reference(value: Any) -> Any:
    return loads(json.dumps(value))


def _shape(value: Any) -> Any:
    """The value with every type spelt out (NaN compares equal to NaN here)."""
    if isinstance(value, dict):
        return ("dict", [(type(k), k, _shape(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_shape(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return (float, "nan")
    return (type(value), value)


@given(VALUES)
def test_the_copy_is_the_json_round_trip(value: Any) -> None:
    try:
        expected = _reference(value)
    except (TypeError, ValueError, UnicodeEncodeError) as refused:
        with pytest.raises(type(refused)):
            _private(value)
        return
    copied = _private(value)
    assert _shape(copied) == _shape(expected)


@pytest.mark.parametrize("value", [
    {"cost": math.nan}, [math.inf, -math.inf], {"deep": [{"x": [1.5, math.nan]}]},
    {1: "int key"}, {"wide": 2**70}, (1, [2, (3,)]), {"status": Colour.RED},
])
def test_what_orjson_would_write_differently_is_copied_as_json_does(value: Any) -> None:
    assert _shape(_private(value)) == _shape(_reference(value))


@pytest.mark.parametrize("value", [
    {"s": {1, 2}}, {"when": datetime(2026, 1, 1, tzinfo=UTC)}, {"e": Plain.ONE},
    {"id": uuid.UUID(int=1)}, {"b": b"x"},
])
def test_what_json_refuses_is_still_refused(value: Any) -> None:
    with pytest.raises(TypeError):
        _reference(value)
    with pytest.raises(TypeError):
        _private(value)


def test_a_copied_state_shares_nothing_with_its_wire_form() -> None:
    wire = RunState(memory={"k": {"v": [1, 2]}}).to_wire()
    copied = RunState.from_wire(wire)
    copied.memory["k"]["v"].append(3)
    assert wire["memory"] == {"k": {"v": [1, 2]}}
