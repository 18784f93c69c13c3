"""One timeline bar: a node execution as the run page draws it.

A leaf: the timeline builds bars and its filters select among them, and neither imports the
other's module for the type (no import cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from forklab.engine.status import ExecutionStatus


@dataclass
class Bar:
    node: str
    occurrence: int
    iteration: int
    start_seq: int
    started: float
    kind: str = ""
    end_seq: int | None = None
    ended: float | None = None
    status: ExecutionStatus = "running"
    cost_usd: float = 0.0
    tokens: int = 0
    unpriced: bool = False
    labels: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    route: str | None = None
    memo: bool = False
    blocked: bool = False
    turns: int = 0  # model calls answered
    tool_calls: int = 0  # tool calls a model chose that returned (a tool loop when > 0)
    offset_pct: float = 0.0
    width_pct: float = 0.0
    after_point: int | None = None  # the boundary after this execution, when forkable

    @property
    def before_point(self) -> int:
        return self.start_seq - 1

    @property
    def duration_ms(self) -> float | None:
        return None if self.ended is None else round((self.ended - self.started) * 1000, 1)

    @property
    def label(self) -> str:
        """One provenance label for the bar: the strongest of its calls'."""
        for strongest in ("changed", "live", "simulated", "reused"):
            if strongest in self.labels:
                return strongest
        return "memo" if self.memo else ""
