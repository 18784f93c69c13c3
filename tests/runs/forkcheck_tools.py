"""A tool with hidden state, for ``forkcheck --deep`` tests: each call answers the next number,
so a fork that really re-executes it gets another answer than the recording."""

from __future__ import annotations

import itertools
from typing import Any

from forklab.engine.tools import ToolContext

_TICKS = itertools.count()


def tick(args: dict[str, Any], ctx: ToolContext) -> int:
    return next(_TICKS)
