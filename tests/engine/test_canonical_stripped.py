"""``canonical_json_stripped`` writes, character for character, what the json module's
canonical encoder writes (it hashes graphs and fingerprint parts: any difference would
change a graph hash or a memo key)."""

from __future__ import annotations

import json
import math
import random
import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forklab.engine.canonical import canonical_json_stripped

_REFERENCE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_LEAVES = (st.none() | st.booleans() | st.floats(allow_nan=True, allow_infinity=True)
           | st.floats(min_value=-1e-3, max_value=1e-3) | st.integers(min_value=-(2**80),
                                                                        max_value=2**80)
           | st.text(max_size=12))
_VALUES = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_it_writes_what_the_json_module_writes(value: Any) -> None:
    assert canonical_json_stripped(value) == _REFERENCE.encode(value)


def test_floats_of_every_magnitude_and_every_code_point_are_written_alike() -> None:
    rnd = random.Random(7)
    floats = [0.0, -0.0, 1e-4, 1e-5, 1.5e-5, 1e15, 1e16, 1e22, 5e-324, math.nan, math.inf,
              *(struct.unpack("d", struct.pack("Q", rnd.getrandbits(64)))[0]
                for _ in range(20_000)),
              *(rnd.uniform(-1, 1) * 10 ** rnd.randint(-30, 30) for _ in range(20_000))]
    texts = ["".join(chr(c) for c in range(start, min(start + 512, 0xD800)))
             for start in range(0, 0xD800, 512)]
    texts += ["".join(chr(c) for c in range(start, start + 512))
              for start in range(0xE000, 0x10FFFF - 512, 4099)]
    for value in [*floats, *texts, {"b": floats[:50], "a": texts[:3], "é": 1, "z": "e-5"}]:
        assert canonical_json_stripped(value) == _REFERENCE.encode(value), repr(value)[:80]


def test_strings_that_look_like_floats_orjson_spells_apart_change_nothing() -> None:
    """The marks of such a float (a digit then ``e``, ``.0000``, ``null``) in strings, keys
    and hex digests, beside floats of both kinds: the text is the json module's."""
    marks = ["answer 3d6e17076f8d24c2", "null", "0.00001", "1E5", "x.0000y", "NaN", "inf"]
    floats = [0.5, 1e-4, 1e15, 123456789.125, -0.0, 1e-5, 1e16, math.nan, -math.inf]
    for mark in marks:
        for number in [None, 1, *floats]:
            value = {mark: [mark, {"f": number, "s": mark}], "t": (mark, number)}
            assert canonical_json_stripped(value) == _REFERENCE.encode(value), value


def test_what_orjson_refuses_is_written_by_the_json_module() -> None:
    for value in ({"n": 2**70}, [2**64], {1: "a"}, "\ud800", {"k": [1.5, -(2**65)]}):
        assert canonical_json_stripped(value) == _REFERENCE.encode(value)


@settings(max_examples=200, deadline=None)
@given(_VALUES)
def test_canonical_json_is_the_json_module_text_of_the_value_without_none_keys(
        value: Any) -> None:
    from forklab.engine.canonical import _strip_none, canonical_json

    assert canonical_json(value) == _REFERENCE.encode(_strip_none(value))


_NO_NONE = st.recursive(
    st.booleans() | st.floats(allow_nan=True, allow_infinity=True) | st.integers()
    | st.text(max_size=12) | st.sampled_from(["null", "3e7f", "0.00001"]),
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(_NO_NONE)
def test_a_value_without_none_is_written_without_the_stripping_walk_alike(value: Any) -> None:
    """canonical_json skips the walk that drops None-valued keys when orjson's text has no
    null: tuples, wide integers, float-like strings and NaN included, the text is the same."""
    from forklab.engine.canonical import _strip_none, canonical_json

    assert canonical_json(value) == _REFERENCE.encode(_strip_none(value))


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_the_one_pass_fingerprint_is_the_fingerprint_whenever_it_answers(value: Any) -> None:
    """``fingerprint_unless_null`` (a graph's content hash) answers for every value orjson
    writes without ``null`` — floats spelled apart and wide integers included — and then
    with ``fingerprint``'s hash; it declines the rest (the caller strips them first)."""
    from forklab.engine.canonical import fingerprint, fingerprint_unless_null, hash_text

    found = fingerprint_unless_null(value)
    text = _REFERENCE.encode(value)
    if found is None:
        assert "null" in text or "NaN" in text or "Infinity" in text or _wide(value)
    else:
        assert found == fingerprint(value) == hash_text(text)


def _wide(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, list, dict)):
        return False
    if isinstance(value, int):
        return not -(2**63) <= value < 2**64
    return any(map(_wide, value.values() if isinstance(value, dict) else value))


def test_values_the_json_module_refuses_are_still_refused() -> None:
    import dataclasses
    from datetime import UTC, datetime
    from enum import StrEnum

    import pytest

    @dataclasses.dataclass
    class Point:
        x: int

    class Colour(StrEnum):
        RED = "red"

    for value in (datetime(2026, 1, 1, tzinfo=UTC), Point(1), {"p": [Point(2)]}):
        with pytest.raises(TypeError):
            canonical_json_stripped(value)
    assert canonical_json_stripped({"c": Colour.RED}) == _REFERENCE.encode({"c": Colour.RED})
