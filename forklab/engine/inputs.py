"""Edge validation: what a JSON value or a graph document must satisfy before forklab keeps it.

Every way data enters — a run input, an API body, a form's JSON field, a CLI flag, a tool's
output, a model's reply, a registered graph — passes :func:`check_json_value` (or
:func:`check_json_text` before parsing, and :func:`check_graph_document` for graphs) so that
nothing the stores cannot hold, or that later breaks a page, a list or ``--json`` output, is
ever appended. The stated limits:

- strings are encodable UTF-8 (no lone UTF-16 surrogate) and hold no NUL character — SQLite
  keeps a lone surrogate but every reader then fails to encode it; PostgreSQL refuses NUL;
- numbers are finite (no NaN, +Infinity or -Infinity) and integers fit in 64 bits;
- object keys are strings (the same string rules apply to them);
- nesting is at most :data:`MAX_DEPTH` levels (a scalar is depth 0);
- the value's JSON text is at most :data:`MAX_BYTES` bytes (UTF-8), a graph document's at
  most :data:`MAX_GRAPH_BYTES`;
- a graph has at most :data:`MAX_GRAPH_NODES` nodes and :data:`MAX_GRAPH_EDGES` edges.

Every check is iterative (an explicit stack), so a hostile input nested a million levels
deep is refused with a clear error, never a ``RecursionError``. The error is
:class:`~forklab.engine.errors.InvalidInput` (code ``invalid_input``) naming the JSON path of
the first offending part (``input.items[3].name``) and what to do.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from forklab.engine.errors import InvalidInput, indefinite

MAX_DEPTH = 64
MAX_BYTES = 4 * 1024 * 1024
MAX_GRAPH_BYTES = 16 * 1024 * 1024
MAX_GRAPH_NODES = 20_000
MAX_GRAPH_EDGES = 100_000
INT_MIN, INT_MAX = -(2**63), 2**63 - 1

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A JSON string token or one bracket: what the pre-parse depth scan looks at.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if _IDENT.fullmatch(key) else f"{path}[{key!r}]"


def error_path(loc: tuple[str | int, ...], data: Any, kind: str = "") -> str:
    """A pydantic error location as the user's path in ``data`` (``changes[0].model``).

    pydantic puts the union member it tried (``AllowList``, ``literal['replay','block']``,
    ``list[str]``) and validator tags (``[key]``) into ``loc``; those are not keys the user
    wrote, so a part is kept only where it is a key or index of ``data`` at that point — or,
    for a ``missing`` error, the absent field it names at the end."""
    path, node = "", data
    for i, part in enumerate(loc):
        indexed = isinstance(node, list | tuple) and isinstance(part, int) and 0 <= part < len(node)
        if indexed or (isinstance(node, dict) and part in node):
            node = node[part]
        elif not (i == len(loc) - 1 and kind == "missing" and isinstance(part, str)):
            continue  # a union member or validator tag
        path = _child(path, part) if path else (f"[{part}]" if isinstance(part, int) else
                                                str(part))
    return path


def json_kind(value: Any) -> str:
    """What ``value`` is, in JSON's words (``null``, a boolean, a number, a string, a list,
    an object): what error messages say a value was, never a Python type name."""
    if value is None:
        return "null"
    for kinds, name in ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"),
                        ((list, tuple), "a list"), (dict, "an object")):
        if isinstance(value, kinds):
            return name
    return type(value).__name__


def _printable(text: str) -> str:
    """A short, always-encodable preview of a bad string for the error message."""
    preview = text[:40].encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
    return preview + ("…" if len(text) > 40 else "")


def _check_string(text: str, path: str, what: str) -> int:
    """The string's UTF-8 size; raises InvalidInput for NUL or a lone surrogate."""
    if "\x00" in text:
        raise InvalidInput(
            f"{path}: {what} holds a NUL character (\\u0000) at index {text.index(chr(0))}; "
            "remove it (NUL cannot be stored)", path=path)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"{path}: {what} {_printable(text)!r} is not encodable as UTF-8 (a lone UTF-16 "
            f"surrogate at index {exc.start}); send valid Unicode text", path=path) from None


def _check_scalar(value: Any, path: str) -> int:
    """Checks a non-container value; returns its approximate JSON size in bytes."""
    if value is None or isinstance(value, bool):
        return 5
    if isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise InvalidInput(f"{path}: the integer does not fit in 64 bits; send a smaller "
                               "number or a string", path=path)
        return 20
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"{path}: {value!r} is not a finite number (NaN and Infinity "
                               "are not JSON); send a finite number or null", path=path)
        return 24
    if isinstance(value, str):
        return _check_string(value, path, "the string") + 2
    raise InvalidInput(f"{path}: {indefinite(type(value).__name__)} is not a JSON value; send "
                       "null, a boolean, a number, a string, a list or an object", path=path)


def check_json_value(value: Any, *, where: str = "$", max_depth: int = MAX_DEPTH,
                     max_bytes: int = MAX_BYTES) -> None:
    """Raise :class:`InvalidInput` unless ``value`` is plain JSON forklab can store.

    Plain JSON: None, bool, int (64-bit), finite float, str, list/tuple, dict with str keys,
    nested at most ``max_depth`` levels, whose JSON text is at most ``max_bytes`` bytes
    (approximated from below: the check never needs to serialize the value). ``where`` is
    the path of ``value`` itself in the error (``input``, ``tool 'fetch' result``).
    Iterative; visits each part once.
    """
    size = 0
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict):
            children = []
            for k, v in item.items():
                size += _key(k, path) + 4
                children.append((v, _child(path, k), depth + 1))
            size += 2
        elif isinstance(item, (list, tuple)):
            children = [(v, _child(path, i), depth + 1) for i, v in enumerate(item)]
            size += len(item) + 2
        else:
            size += _check_scalar(item, path)
            children = []
        if children and depth + 1 > max_depth:
            raise InvalidInput(f"{path}: nested deeper than {max_depth} levels; flatten the "
                               "value", path=path, max_depth=max_depth)
        if size > max_bytes:
            raise InvalidInput(f"{where}: larger than {max_bytes} bytes of JSON; send less",
                               path=where, max_bytes=max_bytes)
        stack.extend(reversed(children))


def _key(key: Any, path: str) -> int:
    """The key's UTF-8 size; raises InvalidInput for a non-string or bad string key."""
    if not isinstance(key, str):
        raise InvalidInput(f"{path}: object key {key!r} is {indefinite(type(key).__name__)}; "
                           "JSON object keys are strings", path=path)
    return _check_string(key, path, "an object key")


def too_large(where: str, max_bytes: int, size: int | None = None) -> InvalidInput:
    """The error for JSON text (or a request body) over ``max_bytes``; ``size`` when known."""
    found = f"is {size} bytes, over" if size is not None else "is over"
    return InvalidInput(f"{where}: the JSON text {found} the limit of {max_bytes} bytes; "
                        "send less", path=where, max_bytes=max_bytes)


def check_json_text(text: str | bytes, *, where: str = "$", max_depth: int = MAX_DEPTH,
                    max_bytes: int = MAX_BYTES) -> None:
    """Refuse JSON *text* too large or nested too deep, before any parser recurses into it.

    Only size and bracket depth are checked here (strings are skipped whole, so brackets
    inside them do not count); parse the text afterwards and pass the value to
    :func:`check_json_value` for everything else.
    """
    size = len(text)
    if size > max_bytes:
        raise too_large(where, max_bytes, size)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > max_depth:
                raise InvalidInput(f"{where}: the JSON is nested deeper than {max_depth} "
                                   "levels; flatten it", path=where, max_depth=max_depth)
        elif token in "]}":
            depth -= 1


def strict_constant(name: str) -> Any:
    """``json.loads(..., parse_constant=strict_constant)``: refuse NaN and ±Infinity."""
    raise InvalidInput(f"{name} is not valid JSON (only finite numbers are); send a finite "
                       "number or null", constant=name)


def loads(text: str | bytes, *, where: str = "$", max_depth: int = MAX_DEPTH,
          max_bytes: int = MAX_BYTES) -> Any:
    """Parse JSON text that must pass every edge check (size and depth before parsing, NaN
    and Infinity while parsing, strings after). Malformed JSON raises ``json.JSONDecodeError``
    as usual (callers word that error for their edge); the rest is ``InvalidInput``."""
    check_json_text(text, where=where, max_depth=max_depth, max_bytes=max_bytes)
    value = json.loads(text, parse_constant=strict_constant)
    check_json_value(value, where=where, max_depth=max_depth, max_bytes=max_bytes)
    return value


def check_graph_document(data: Any, *, where: str = "graph") -> None:
    """Refuse a graph document over the stated size limits, or holding bad JSON values.

    Checked before the graph model is built, so a huge document costs a count, not a parse.
    """
    check_json_value(data, where=where, max_bytes=MAX_GRAPH_BYTES)
    if not isinstance(data, dict):
        return  # parse_graph names the problem
    nodes, edges = data.get("nodes"), data.get("edges")
    if isinstance(nodes, list) and len(nodes) > MAX_GRAPH_NODES:
        raise InvalidInput(f"{where}.nodes: {len(nodes)} nodes, over the limit of "
                           f"{MAX_GRAPH_NODES}; split the graph into subgraphs",
                           path=f"{where}.nodes", max_nodes=MAX_GRAPH_NODES)
    if isinstance(edges, list) and len(edges) > MAX_GRAPH_EDGES:
        raise InvalidInput(f"{where}.edges: {len(edges)} edges, over the limit of "
                           f"{MAX_GRAPH_EDGES}; split the graph into subgraphs",
                           path=f"{where}.edges", max_edges=MAX_GRAPH_EDGES)


__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_GRAPH_BYTES", "MAX_GRAPH_EDGES", "MAX_GRAPH_NODES", "InvalidInput",
           "check_graph_document", "check_json_text", "check_json_value", "json_kind", "loads",
           "strict_constant"]
