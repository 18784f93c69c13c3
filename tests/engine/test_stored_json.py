"""``stored_json`` (event bodies) reads back to exactly what the json module's text reads
back to: same types, key order, floats (NaN and infinity included) — whatever wrote it."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forklab.engine.canonical import loads, stored_json

_LEAVES = (st.none() | st.booleans() | st.floats(allow_nan=True, allow_infinity=True)
           | st.floats(min_value=-1e-3, max_value=1e-3)
           | st.integers(min_value=-(2**80), max_value=2**80) | st.text(max_size=12))
_KEYS = st.text(max_size=6) | st.integers(min_value=-3, max_value=3)
_VALUES = st.recursive(
    _LEAVES, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=20)


def _read_back(text: str) -> str:
    """What a reader gets, spelled so that 1, 1.0 and True, NaN and None, key order and
    every float's bits all tell apart (``repr`` of the decoded value)."""
    return repr(loads(text))


def _reference(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@settings(max_examples=500, deadline=None)
@given(_VALUES)
def test_it_reads_back_to_what_the_json_module_text_reads_back_to(value: Any) -> None:
    assert _read_back(stored_json(value)) == _read_back(_reference(value))


def test_non_finite_floats_wide_ints_and_odd_keys_take_the_json_module() -> None:
    for value in ({"x": math.nan, "y": None}, [math.inf, -math.inf, None], {"n": 2**70},
                  {1: "a", "b": None}, "\ud800", ({"t": (1, None)},), [1e16, 1e-5, -0.0]):
        assert _read_back(stored_json(value)) == _read_back(_reference(value)), value
    assert stored_json({"x": math.nan}) == _reference({"x": math.nan})


def test_what_the_json_module_cannot_write_still_raises() -> None:
    for value in ({"s": {1, 2}}, object()):
        try:
            stored_json(value)
        except TypeError:
            continue
        raise AssertionError(f"{value!r} was written")
