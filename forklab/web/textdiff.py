"""Word-level inline diffs of memory values for the diff page (difflib)."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

TOKEN = re.compile(r"\s+|\w+|[^\w\s]")
MAX_TOKENS = 20_000
"""Beyond this many tokens a side, values are compared line by line (difflib is quadratic)."""


@dataclass(frozen=True)
class Piece:
    op: str  # same | del | ins
    text: str


def as_text(value: Any) -> str:
    """Strings as they are; anything else as indented, key-sorted JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def word_diff(before: Any, after: Any) -> list[Piece]:
    """``before`` → ``after`` as pieces kept, deleted and inserted, words and spaces apart."""
    a, b = as_text(before), as_text(after)
    tokens_a, tokens_b = TOKEN.findall(a), TOKEN.findall(b)
    if max(len(tokens_a), len(tokens_b)) > MAX_TOKENS:
        tokens_a, tokens_b = a.splitlines(keepends=True), b.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, tokens_a, tokens_b, autojunk=False)
    pieces: list[Piece] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            pieces.append(Piece("same", "".join(tokens_a[i1:i2])))
            continue
        if i2 > i1:
            pieces.append(Piece("del", "".join(tokens_a[i1:i2])))
        if j2 > j1:
            pieces.append(Piece("ins", "".join(tokens_b[j1:j2])))
    return pieces


def similarity(before: Any, after: Any) -> float:
    """How much of the text survived, 0..1 (shown next to a changed value)."""
    a, b = TOKEN.findall(as_text(before)), TOKEN.findall(as_text(after))
    if not a and not b:
        return 1.0
    if max(len(a), len(b)) > MAX_TOKENS:
        return 0.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def pieces_html(pieces: list[Piece]) -> SafeString:
    """The pieces as HTML: ``<del>`` and ``<ins>`` around what changed, text escaped."""
    tags = {"del": ("<del>", "</del>"), "ins": ("<ins>", "</ins>"), "same": ("", "")}
    return mark_safe("".join(f"{tags[p.op][0]}{escape(p.text)}{tags[p.op][1]}"
                             for p in pieces))


def sides(before: Any, after: Any) -> tuple[SafeString, SafeString]:
    """``before`` and ``after`` as two HTML columns: the left marks what was deleted, the
    right what was inserted, the words they share unmarked on both."""
    pieces = word_diff(before, after)
    left = pieces_html([p for p in pieces if p.op != "ins"])
    right = pieces_html([p for p in pieces if p.op != "del"])
    return left, right
