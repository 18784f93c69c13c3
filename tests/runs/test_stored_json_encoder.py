"""``StoredJSONEncoder``: the log's JSON columns read back exactly as Django's default encoder
wrote them — any JSON value, NaN and infinities included — and a lone surrogate is escaped
(ASCII), as before, so SQLite can store it."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forklab.runs.models.runs import StoredJSONEncoder

floats = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.none() | st.booleans() | st.integers() | floats | st.text()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20)


def same(a: Any, b: Any) -> bool:
    """Equal, a NaN equal to a NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@given(values)
def test_a_value_reads_back_as_the_default_encoder_wrote_it(value: Any) -> None:
    ours = json.dumps(value, cls=StoredJSONEncoder)
    assert same(json.loads(ours), json.loads(json.dumps(value)))


def test_a_lone_surrogate_is_escaped_not_written() -> None:
    text = json.dumps({"note": "bad \ud800 text", "n": None}, cls=StoredJSONEncoder)
    assert text.isascii() and json.loads(text) == {"note": "bad \ud800 text", "n": None}
