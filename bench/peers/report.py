"""Markdown tables of the peer comparison: medians, model calls, ratios to forklab."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from bench.peers.workloads import MEASUREMENTS

if TYPE_CHECKING:
    from bench.peers.run import Options, Results, Sample

BASE = "forklab"
TIMES = "\u00d7"  # the multiplication sign of "3.2x", spelled out for ruff (RUF001)
TITLES = {"forklab": "forklab (SQLite)", "activegraph": "activegraph 1.12",
          "langgraph": "LangGraph 1.2 (SqliteSaver)", "langgraph-cache": "LangGraph + node cache"}
SIZE_ROWS = (("record-chain", "store after recording a chain"),
             ("null-fork", "store added by the null fork at N/2"),
             ("fork-last", "store added by one fork before the last node"),
             ("record-fanout", "store after recording a fan-out"),
             ("fork-worker0", "store added by the worker-0 fork"))
BASE_OF = {"null-fork": "record-chain", "fork-last": "record-chain",
           "fork-worker0": "record-fanout"}


def seconds_text(value: float) -> str:
    return f"{value * 1000:.1f} ms" if value < 0.1 else f"{value:.3g} s"


def bytes_text(value: float) -> str:
    return f"{value / 1e6:.1f} MB" if value >= 1e6 else f"{value / 1e3:.0f} kB"


def calls_text(samples: Sequence[Sample]) -> str:
    calls = sorted(s.calls for s in samples)
    spread = f"{calls[0]:,}" if calls[0] == calls[-1] else f"{calls[0]:,} to {calls[-1]:,}"
    return f"{spread} call" + ("" if calls[-1] == 1 else "s")


def ok(samples: Sequence[Sample]) -> list[Sample]:
    return [s for s in samples if s.error is None]


def median(samples: Sequence[Sample], figure: Callable[[Sample], float]) -> float | None:
    good = ok(samples)
    return statistics.median(figure(s) for s in good) if good else None


def failure_text(samples: Sequence[Sample]) -> str:
    failed = [s for s in samples if s.error]
    if not failed:
        return ""
    if len(failed) == len(samples):
        return f"failed: {failed[0].error}"
    return f" ({len(failed)} of {len(samples)} runs failed)"


def time_cell(results: Results, name: str, system: str) -> str:
    samples = results.get((name, system), [])
    value = median(samples, lambda s: s.seconds)
    if value is None:
        return failure_text(samples) or "—"
    text = f"{seconds_text(value)}, {calls_text(ok(samples))}"
    base = median(results.get((name, BASE), []), lambda s: s.seconds)
    if system != BASE and base:
        text += f" ({value / base:.1f}{TIMES})"
    flagged = any(s.checks for s in samples)
    return text + (" ✗" if flagged else "") + failure_text(samples)


def size_cell(results: Results, name: str, system: str) -> str:
    size = median(results.get((name, system), []), lambda s: float(s.size_bytes or 0))
    if size is None:
        return failure_text(results.get((name, system), [])) or "—"
    parts = [bytes_text(size)]
    if name in BASE_OF:
        base = median(results.get((BASE_OF[name], system), []),
                      lambda s: float(s.size_bytes or 0))
        if base:
            parts.append(f"{100 * size / base:.0f}% of its base")
    ref = median(results.get((name, BASE), []), lambda s: float(s.size_bytes or 0))
    if system != BASE and ref:
        parts.append(f"{size / ref:.1f}{TIMES}")
    return ", ".join(parts)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def environment_line(load_before: tuple[float, ...], load_after: tuple[float, ...]) -> str:
    versions = []
    for package in ("activegraph", "langgraph", "langgraph-checkpoint-sqlite"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    return (f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} CPUs, load average "
            f"(1 min) {load_before[0]:.2f} before → {load_after[0]:.2f} after; Python "
            f"{platform.python_version()}; forklab {_commit()}; {', '.join(versions)}")


def _commit() -> str:
    """The last commit that changed ``forklab/``: the engine version measured."""
    try:
        done = subprocess.run(["git", "log", "-1", "--format=%h", "--", ":/forklab"],
                              capture_output=True, text=True, check=False,
                              cwd=Path(__file__).parent)
    except OSError:
        return "at an unknown commit"
    return f"at {done.stdout.strip()}" if done.stdout.strip() else "at an unknown commit"


def problems(results: Results) -> list[str]:
    return sorted({f"- {system} {name}: {problem}" for (name, system), samples in results.items()
                   for s in samples for problem in s.checks})


def render(results: Results, options: Options, load_before: tuple[float, ...],
           load_after: tuple[float, ...]) -> str:
    systems = options.systems
    header = ["workload", *(TITLES[s] for s in systems)]
    names = [m.name for m in MEASUREMENTS]
    timed = [[m.title, *(time_cell(results, m.name, s) for s in systems)]
             for m in MEASUREMENTS if any((m.name, s) in results for s in systems)]
    sized = [[title, *(size_cell(results, name, s) for s in systems)]
             for name, title in SIZE_ROWS if name in names
             and any((name, s) in results for s in systems)]
    out = [f"## Peer comparison: N = {options.n:,}, median of {options.repeat} run(s)", "",
           environment_line(load_before, load_after), "",
           f"Wall time of the operation and the model calls it made; (k{TIMES}) = the peer's "
           "figure divided by forklab's: above 1, forklab is k times faster (or smaller).", "",
           table(header, timed), "", table(["store on disk", *header[1:]], sized)]
    if problems(results):
        out += ["", "✗ failed checks:", *problems(results)]
    return "\n".join(out)
