"""Canonical JSON: the one way forklab compares and hashes values.

Keys are sorted and keys whose value is ``None`` are treated as absent, so a value that went
through PostgreSQL ``jsonb`` (which reorders keys) or through a serializer that drops nulls
compares equal to the original. Tuples serialize as lists.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import orjson

_LEAVES = frozenset({str, int, float, bool})
"""Types that serialise as they are: not recursed into (most values of a record are these)."""


def _strip_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k if type(k) is str else str(k): v if type(v) in _LEAVES else _strip_none(v)
                for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [v if type(v) in _LEAVES else _strip_none(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_strip_none(v) for v in value)
    return value


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""``json.dumps`` with these options builds an encoder per call; this one is shared (its
``encode`` keeps no state between calls, so it is safe from any thread)."""


def canonical_json(value: Any) -> str:
    """Serialize ``value`` with sorted keys, no whitespace, and ``None``-valued keys dropped.

    When orjson writes ``value`` without a ``null`` it holds no ``None`` (nor a key to
    convert: orjson refuses non-string keys), so the walk that drops them would copy it
    unchanged: its text is orjson's, checked as in :func:`canonical_json_stripped`."""
    data = _orjson(value)
    if data is None or b"null" in data:
        return canonical_json_stripped(_strip_none(value))
    return data.decode() if _spelled_alike(value, data) else _CANONICAL.encode(value)


_ORJSON_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
                   | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS)


def canonical_json_stripped(value: Any) -> str:
    """:func:`canonical_json` of a value that holds no ``None``-valued key (skips the walk
    that drops them; a value that may hold one must go to :func:`canonical_json`).

    Written by orjson (sorted keys; ~10x faster than the json module's C encoder) when its
    text is provably the json module's: both escape strings alike (every code point
    compared) and sort keys in the same (code point) order; they differ only on floats —
    orjson writes ``1e-05`` as ``0.00001`` and NaN/infinity as ``null``. So when the text
    holds a digit followed by ``e``, ``.0000`` or ``null`` anywhere, the value is walked for
    such a float (:func:`_float_spelled_apart`; the marks are mostly in strings — a hex
    digest, a model's answer saying "null") and written by the json module if it has one.
    So is whatever orjson refuses
    (integers wider than 64 bits, non-string keys, sets, lone surrogates) or passes through
    (dataclasses, datetimes, subclasses of str/int/dict/list such as a ``StrEnum``): the
    json module raises TypeError on those it cannot write, as before. (orjson still writes
    a plain ``Enum`` or a ``UUID`` — the json module would refuse them; engine values are
    plain JSON data, so neither reaches here.)"""
    text = orjson_canonical(value)
    return _CANONICAL.encode(value) if text is None else text


def _orjson(value: Any) -> bytes | None:
    """orjson's canonical text of ``value``, or None where it refuses it (TypeError)."""
    try:
        return orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:
        return None


def _spelled_alike(value: Any, data: bytes) -> bool:
    """Whether the json module writes ``value`` as ``data`` (orjson's text of it)."""
    return not (_may_spell_a_float_apart(data) and _float_spelled_apart(value))


def orjson_canonical(value: Any) -> str | None:
    """orjson's text of ``value`` when it is provably :func:`canonical_json_stripped`'s
    (see there), else None.

    Then so is orjson's text of every value nested in ``value``, and of a mapping of
    ``value`` with some keys left out: orjson writes a nested value the same wherever it
    stands, and a part of a value orjson accepts, holding no float the two encoders spell
    apart, holds none either. :func:`unchecked_canonical` writes them without the checks."""
    data = _orjson(value)
    return data.decode() if data is not None and _spelled_alike(value, data) else None


def unchecked_canonical(value: Any) -> str:
    """orjson's text of ``value``, unchecked: :func:`canonical_json_stripped`'s only for a
    part of a value :func:`orjson_canonical` wrote (see there)."""
    return orjson.dumps(value, option=_ORJSON_OPTIONS).decode()


_STORED = json.JSONEncoder(ensure_ascii=False)
_STORED_OPTIONS = (orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
                   | orjson.OPT_PASSTHROUGH_SUBCLASS)


def stored_json(value: Any, fallback: Callable[[Any], str] = _STORED.encode) -> str:
    """JSON text of ``value`` to store (an event body), which :func:`loads` reads back to
    exactly what it reads from ``json.dumps(value, ensure_ascii=False)``, key order and
    types included; the text itself may differ in whitespace and float spelling.

    Written by orjson (compact, ~5x faster) when that holds: both keep key order, write
    strings, ints, bools and containers alike (tuples as lists) and floats in a shortest
    form that reads back to the same double; orjson writes NaN and infinity as ``null``
    instead — so a text holding ``null`` is read back and compared with ``value`` (a
    ``None`` where a float was is unequal; a tuple read back as a list also fails the
    comparison, which only costs the slower encoder) — and refuses or passes through what
    :func:`canonical_json_stripped` lists (wide integers, non-string keys, lone surrogates,
    dataclasses, datetimes, subclasses): those go to the json module, which raises
    TypeError on what it cannot write, as before. (orjson still writes a plain ``Enum`` or
    a ``UUID``, which the json module would refuse; engine values are plain JSON data.)
    ``fallback`` is that json module encoder: another one (``ensure_ascii`` on, so a lone
    surrogate is escaped rather than written) changes how the refused values are written."""
    try:
        data = orjson.dumps(value, option=_STORED_OPTIONS)
    except TypeError:
        return fallback(value)
    if b"null" in data and orjson.loads(data) != value:
        return fallback(value)
    return data.decode()


def _may_spell_a_float_apart(data: bytes) -> bool:
    """Whether orjson's text ``data`` has a mark of a float the json module writes otherwise
    (a cheap test on the text; strings may hold the marks too)."""
    if b"null" in data or b".0000" in data:
        return True
    marked = data.translate(_DIGITS_TO_ZERO)  # a digit then e/E: find beats a regex 10x
    return b"0e" in marked or b"0E" in marked


def _float_spelled_apart(value: Any) -> bool:
    """Whether ``value`` (which orjson wrote) holds a float orjson and the json module write
    differently, or anything but plain JSON data (then the json module decides, as before).
    Both write a float as its ``repr`` unless that has an exponent (``1e-05``: orjson writes
    ``0.00001``; ``1e+16``: ``1e16``) or is ``nan``/``inf`` (orjson: ``null``); tests
    compare the two on floats of every magnitude."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return False
    if kind is float:
        text = repr(value)
        return "e" in text or "n" in text
    if kind is dict:
        return any(map(_float_spelled_apart, value.values()))
    if kind is list or kind is tuple:
        return any(map(_float_spelled_apart, value))
    return True


def loads(text: str | bytes) -> Any:
    """``json.loads``, several times faster for what orjson reads the same way (stored
    events, states). ``text`` may be UTF-8 bytes (a store's column read as a blob: no
    decoding to ``str`` only to encode it again).

    orjson refuses what the json module writes but strict JSON does not have (``NaN``,
    ``Infinity``) and lone surrogates, and reads an integer wider than 64 bits as a float:
    text orjson refuses and text that may hold such an integer (:func:`_may_hold_wide_int`)
    go to ``json.loads``. So the result is always what ``json.loads`` returns (floats parse
    to the same nearest double; key order is kept and, as there, the last of duplicate keys
    wins).
    """
    if type(text) is bytes:
        data = text
    else:
        try:
            data = text.encode()  # type: ignore[union-attr]
        except UnicodeEncodeError:  # a lone surrogate
            return json.loads(text)
    if not _may_hold_wide_int(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def loads_for(blobs: Sequence[bytes]) -> Callable[[bytes], Any]:
    """A decoder for each of ``blobs`` (UTF-8 bytes, a log's bodies) that reads it as
    :func:`loads` does, with the wide-integer check made once over all of them: joined by
    a newline, which cannot stand inside a digit run, they hold a suspect run only if one
    of them does. Then each is checked on its own (:func:`loads`); otherwise each goes to
    orjson, and the json module reads what orjson refuses. A read of a 5,000-event log made
    5,000 checks of ~300 bytes each, the calls costing more than the bytes. The caller
    decodes body by body as it builds its events: decoding them all first kept 5,000 dicts
    alive at once, which cost more in cache misses than the checks it saved (a fork before
    the last node of a 1,000-node chain ran 14% slower, in 1.5% fewer instructions)."""
    return loads if _may_hold_wide_int(b"\n".join(blobs)) else _loads_narrow


def _loads_narrow(blob: bytes) -> Any:
    """:func:`loads` of a body known to hold no integer wider than 64 bits."""
    try:
        return orjson.loads(blob)
    except orjson.JSONDecodeError:
        return json.loads(blob)


def _may_hold_wide_int(data: bytes) -> bool:
    """Whether ``data`` has a run of 19+ digits that may be a JSON integer: one right after
    what can stand before a number (``:``, ``[``, ``,``, ``-``, whitespace, or nothing).
    Every integer wider than 64 bits has such a run; a float's repr has at most 16 digits
    before its point (it switches to an exponent at 1e16), and its fraction follows a ``.``;
    a run after a letter (a hex hash) is inside a string. A string may still match (say
    ``": 1234…"``): that only costs the slower decoder. Bytes ``translate`` + ``find`` is
    ~8x cheaper than a regular expression here."""
    marked = data.translate(_DIGITS_TO_ZERO)
    start = marked.find(_LONG_RUN)
    while start != -1:
        if start == 0 or marked[start - 1] in _BEFORE_NUMBER:
            return True
        end = start + len(_LONG_RUN)
        while marked[end:end + 1] == b"0":
            end += 1
        start = marked.find(_LONG_RUN, end)
    return False


_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19
_BEFORE_NUMBER = frozenset(b":[,- \t\n\r")


def canonical_equals(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` have the same canonical JSON form."""
    return canonical_json(a) == canonical_json(b)


def fingerprint(value: Any) -> str:
    """A short stable hash (sha256 hex, 32 chars) of ``value``'s canonical JSON."""
    return hash_text(canonical_json(value))


def fingerprint_unless_null(value: Any) -> str | None:
    """:func:`fingerprint` of ``value``, hashed from orjson's bytes in one pass, when orjson
    writes it without a ``null`` (so it holds no ``None`` to drop: its canonical JSON is
    that text, checked as in :func:`canonical_json`); None when the text holds ``null`` or
    orjson refuses the value — the caller then fingerprints a form the walk may strip.
    Equal to ``fingerprint(value)`` whenever it is not None (tests compare them): the text
    is neither decoded to ``str`` nor written a second time only to look for ``null``."""
    data = _orjson(value)
    if data is None or b"null" in data:
        return None
    if not _spelled_alike(value, data):
        return hash_text(_CANONICAL.encode(value))
    return hashlib.sha256(data).hexdigest()[:32]


def hash_text(text: str) -> str:
    """:func:`fingerprint` of a value whose canonical JSON ``text`` is already known."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def json_size(value: Any) -> int:
    """Size in bytes of ``value``'s canonical JSON (UTF-8)."""
    return len(canonical_json(value).encode())


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON merge patch (``null`` deletes, objects merge, anything else replaces).

    Never mutates ``target`` (the library does, so it gets a copy).
    """
    import copy

    import json_merge_patch

    return json_merge_patch.merge(copy.deepcopy(target), copy.deepcopy(patch))
