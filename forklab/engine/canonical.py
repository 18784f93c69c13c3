"""Canonical JSON: the one way forklab compares and hashes values.

Keys are sorted and keys whose value is ``None`` are treated as absent, so a value that went
through PostgreSQL ``jsonb`` (which reorders keys) or through a serializer that drops nulls
compares equal to the original. Tuples serialize as lists.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

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
    """Serialize ``value`` with sorted keys, no whitespace, and ``None``-valued keys dropped."""
    return _CANONICAL.encode(_strip_none(value))


def canonical_equals(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` have the same canonical JSON form."""
    return canonical_json(a) == canonical_json(b)


def fingerprint(value: Any) -> str:
    """A short stable hash (sha256 hex, 32 chars) of ``value``'s canonical JSON."""
    return hash_text(canonical_json(value))


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
