"""What one measurement process reports, and the small file a recording leaves for its forks."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

META = "meta.json"


@dataclass
class Outcome:
    """A timed operation: wall seconds, model calls made, and the run's final answer."""

    seconds: float
    calls: int
    final: str

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def save_meta(directory: Path, **fields: Any) -> None:
    """Written by a recording next to its store: what its forks need (run id, final answer)."""
    (directory / META).write_text(json.dumps(fields))


def load_meta(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / META).read_text())
    return data
