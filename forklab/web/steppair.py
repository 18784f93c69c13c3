"""Two executions side by side (the diff's step view): their calls paired in order, each
value of what was sent and what came back compared word by word (``textdiff.sides``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import zip_longest

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from forklab.web.steps import Exchange, Step, Value
from forklab.web.textdiff import sides


@dataclass
class Row:
    """One value (a prompt, a message, the reply, a tool result) on both sides."""

    name: str
    left: SafeString
    right: SafeString
    same: bool
    long: bool = False


@dataclass
class Pair:
    base: Exchange | None
    variant: Exchange | None
    rows: list[Row] = field(default_factory=list)

    @property
    def title(self) -> str:
        shown = self.variant or self.base
        return shown.title if shown is not None else ""

    @property
    def changed(self) -> bool:
        return any(not row.same for row in self.rows)


def _values(exchange: Exchange | None) -> dict[str, Value]:
    if exchange is None:
        return {}
    return {v.name: v for v in [*exchange.sent, *exchange.answer]}


def _row(name: str, left: Value | None, right: Value | None) -> Row:
    long = any(v is not None and v.long for v in (left, right))
    if left is not None and right is not None:
        if left.text == right.text:
            same = mark_safe(escape(left.text))
            return Row(name=name, left=same, right=same, same=True, long=long)
        a, b = sides(left.text, right.text)
        return Row(name=name, left=a, right=b, same=False, long=long)
    missing = mark_safe('<span class="faint">—</span>')
    return Row(name=name, left=mark_safe(escape(left.text)) if left else missing,
               right=mark_safe(escape(right.text)) if right else missing, same=False,
               long=long)


def pair(base: Step | None, variant: Step | None) -> list[Pair]:
    """The calls of two executions of one node, paired by position."""
    pairs = []
    for b, v in zip_longest(base.exchanges if base else [], variant.exchanges if variant
                            else []):
        left, right = _values(b), _values(v)
        names = list(dict.fromkeys([*left, *right]))
        pairs.append(Pair(base=b, variant=v,
                          rows=[_row(n, left.get(n), right.get(n)) for n in names]))
    return pairs
