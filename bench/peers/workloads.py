"""What every system builds and measures: the shapes, their prompts, the measurements.

Every system reads its prompts from here, so "node i" means the same agent everywhere:

- ``chain``: agents ``n0 … n{N-1}``; ``n0`` answers the task, ``n{i}`` answers ``n{i-1}``'s
  output. Model latency 0 ms, so the figures are each system's own overhead.
- ``fanout``: a non-model ``dispatch`` step, then workers ``w0 … w{N-1}`` that all answer the
  task, then one ``join`` agent whose prompt holds every worker's answer. Latency 20 ms.

A measurement is one timed operation in a fresh process (``worker.py``): recording a shape,
or one fork of a recorded shape. Forks start from a copy of the recording's store on disk.
A *warm* fork is the same fork made second in its process: the process first makes it,
untimed, on another copy of the recording, so imports, first calls and caches keyed by
content (a parsed graph, a compiled one) are warm, but nothing of the run timed is held —
what a long-lived server pays for a fork, where a fresh process is what a CLI pays.
"""

from __future__ import annotations

from dataclasses import dataclass

TASK = "Summarise the quarterly report."
CHANGED_LAST_PROMPT = "You are the last step; answer in one line."
CHANGED_WORKER_PROMPT = "You are worker 0; answer tersely."
JOIN_PROMPT = "You combine the workers' answers into one."
FANOUT_LATENCY_MS = 20.0


def step_prompt(i: int) -> str:
    return f"You are step {i} of the chain."


def worker_prompt(i: int) -> str:
    return f"You are worker {i}."


def chain_node(i: int) -> str:
    return f"n{i}"


def worker_node(i: int) -> str:
    return f"w{i}"


@dataclass(frozen=True)
class Measurement:
    """One timed operation; ``fork`` is None for a recording."""

    name: str
    shape: str  # "chain" | "fanout"
    fork: str | None
    title: str
    warm: bool = False  # made second in its process (see the module's docstring)


RECORD_CHAIN = Measurement("record-chain", "chain", None, "record a chain, 0 ms")
NULL_FORK = Measurement("null-fork", "chain", "null", "null fork at N/2 of a chain, 0 ms")
FORK_LAST = Measurement("fork-last", "chain", "last",
                        "fork before the last node of a chain (its prompt changed), 0 ms")
RECORD_FANOUT = Measurement("record-fanout", "fanout", None, "record a fan-out, 20 ms")
FORK_WORKER = Measurement("fork-worker0", "fanout", "worker0",
                          "fan-out, change worker 0 (its prompt), 20 ms")
FORK_WORKER_WARM = Measurement("fork-worker0-warm", "fanout", "worker0",
                               "the same, second fork in a warm process", warm=True)

MEASUREMENTS = (NULL_FORK, FORK_LAST, FORK_WORKER, FORK_WORKER_WARM, RECORD_FANOUT,
                RECORD_CHAIN)
SHAPES = ("chain", "fanout")


def latency_ms(shape: str, fanout_latency_ms: float = FANOUT_LATENCY_MS) -> float:
    return fanout_latency_ms if shape == "fanout" else 0.0


def fork_calls_floor(fork: str) -> int:
    """The fewest model calls a fork can make: what changed and what depends on it."""
    return {"null": 0, "last": 1, "worker0": 2}[fork]
