"""``canonical.loads`` returns exactly what ``json.loads`` does, only faster where it can.

Stored events and states are decoded with it, so any difference (an integer read as a float,
a NaN refused) would change what a fold or a fork sees.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from forklab.engine.canonical import loads, loads_for

_LEAVES = (st.none() | st.booleans() | st.floats(allow_nan=True, allow_infinity=True)
           | st.integers(min_value=-(2**80), max_value=2**80) | st.text(max_size=12))
_VALUES = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=20)


def _same(a: Any, b: Any) -> bool:  # repr tells 1 from 1.0, nan from None, key order apart
    return repr(a) == repr(b)


@settings(max_examples=300, deadline=None)
@given(_VALUES, st.booleans())
def test_loads_reads_whatever_json_dumps_wrote_as_json_loads_does(value: Any,
                                                                   ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert _same(loads(text), json.loads(text))
    try:
        blob = text.encode()
    except UnicodeEncodeError:  # a lone surrogate written raw: no UTF-8 blob holds it
        return
    assert _same(loads(blob), json.loads(text))  # a store's column read as a blob


@settings(max_examples=200, deadline=None)
@given(st.lists(_VALUES, max_size=6))
def test_loads_for_reads_a_log_of_bodies_as_json_loads_reads_each(values: list[Any]) -> None:
    # one wide integer or NaN among them sends the batch down the careful path; none, the fast
    texts = [json.dumps(value) for value in values]
    blobs = [text.encode() for text in texts]
    decode = loads_for(blobs)
    decoded = [decode(blob) for blob in blobs]
    assert [repr(d) for d in decoded] == [repr(json.loads(text)) for text in texts]


def test_loads_for_keeps_a_wide_integer_an_integer_beside_plain_bodies() -> None:
    blobs = [b'{"n": 1}', json.dumps({"n": 2**70}).encode(), b'{"x": NaN}', b"[]"]
    decode = loads_for(blobs)
    assert decode(blobs[1]) == {"n": 2**70} and type(decode(blobs[1])["n"]) is int
    assert repr(decode(blobs[2])) == repr({"x": float("nan")})
    plain = [b'{"x": NaN}', b"{}"]  # no wide integer anywhere: the narrow path reads NaN too
    assert repr([loads_for(plain)(b) for b in plain]) == repr([{"x": float("nan")}, {}])


def test_integers_wider_than_64_bits_stay_integers() -> None:
    for number in (2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30, -(10**19)):
        assert loads(json.dumps({"n": number})) == {"n": number}
        assert type(loads(json.dumps([number]))[0]) is int


def test_text_only_the_json_module_accepts_is_still_read() -> None:
    assert repr(loads('{"x": NaN, "y": -Infinity}')) == repr({"x": float("nan"),
                                                             "y": float("-inf")})
    assert loads('"\\ud800"') == "\ud800"  # a lone surrogate, escaped
    assert loads('{"a": 1, "a": 2}') == {"a": 2}  # the last duplicate wins, as in json


def test_long_fractions_take_the_fast_path_and_read_the_same() -> None:
    from forklab.engine.canonical import _may_hold_wide_int

    text = json.dumps({"cost_usd": 0.00012000000000000002, "n": [1234567890123456.7]})
    assert not _may_hold_wide_int(text.encode())
    assert _same(loads(text), json.loads(text))
    assert _may_hold_wide_int(json.dumps({"n": -(2**64)}).encode())
    assert _may_hold_wide_int(json.dumps([2**70]).encode())


def test_digits_inside_a_hash_take_the_fast_path() -> None:
    from forklab.engine.canonical import _may_hold_wide_int

    text = json.dumps({"request_hash": "1d305837599068723118774c665410af", "n": 2**50})
    assert not _may_hold_wide_int(text.encode())
    assert _same(loads(text), json.loads(text))
    for wide in ([2**64], {"a": -(2**64)}, [1, 2**65], {"a": 2**64}):
        assert _may_hold_wide_int(json.dumps(wide).encode())
        assert _may_hold_wide_int(json.dumps(wide, indent=2).encode())
