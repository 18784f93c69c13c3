"""Prometheus metrics for workflow runs, node executions and model calls (SPEC §3.11).

Fed from one place: :class:`forklab.runs.store.DjangoStore` hands every committed append to
:func:`observe`, so recorded runs, fork tails, sweeps and answered gates are counted the same
way in whichever process executes them (web thread pool, queue worker or CLI). Every series is
labelled ``run_kind`` (``primary`` | ``subgraph`` | ``counterfactual``); a fork counts only
what its tail appended — its inherited prefix is not executed again and is not counted.

Several processes: each process counts what it executed. With ``PROMETHEUS_MULTIPROC_DIR``
set (one directory shared by the web processes and workers of one host; see
docs/deployment.md) ``/metrics`` aggregates them all.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from forklab.engine.actions import AgentAnswer, ToolResult
from forklab.engine.events import (
    AgentResponded,
    Event,
    NodeCompleted,
    NodeFailed,
    NodeReused,
    RunBlocked,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
    ToolReturned,
)
from forklab.engine.state import RunState

SECONDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

RUNS_STARTED = Counter("forklab_workflow_runs_started", "Workflow runs started (a fork's "
                       "tail counts as one counterfactual run).", ["run_kind"])
RUNS_FINISHED = Counter("forklab_workflow_runs_finished", "Workflow runs that reached a final "
                        "status.", ["run_kind", "status"])
RUN_SECONDS = Histogram("forklab_workflow_run_duration_seconds", "Wall-clock time from a run's "
                        "first event to its final one.", ["run_kind"], buckets=SECONDS)
NODES = Counter("forklab_node_executions", "Node executions that finished.",
                ["run_kind", "node_kind", "status"])
NODE_SECONDS = Histogram("forklab_node_execution_duration_seconds", "Duration of one node "
                         "execution.", ["run_kind", "node_kind"], buckets=SECONDS)
MODEL_CALLS = Counter("forklab_model_calls", "Model calls by provenance label "
                      "(live|changed|reused|simulated).", ["run_kind", "model", "label"])
MODEL_TOKENS = Counter("forklab_model_tokens", "Tokens of model calls.",
                       ["run_kind", "direction"])
MODEL_COST = Counter("forklab_model_cost_usd", "Priced cost of model calls (USD).",
                     ["run_kind", "label"])
MODEL_SECONDS = Histogram("forklab_model_call_latency_seconds", "Latency of model calls.",
                          ["run_kind"], buckets=SECONDS)
TOOL_CALLS = Counter("forklab_tool_calls", "Tool results by provenance label.",
                     ["run_kind", "label"])

class Tally:
    """What one append adds to the series, summed per series before anything is applied.

    Counters are kept as one total per (metric, labels) and histograms as the values seen
    per (metric, labels), so applying costs one ``labels()`` lookup per series touched, not
    one per event: a fork tail of 1,000 served nodes adds 1,000 to a handful of series.
    Invariant: applying a tally changes every series exactly as observing its events one by
    one would.
    """

    __slots__ = ("counts", "samples")

    def __init__(self) -> None:
        self.counts: dict[tuple[Counter, tuple[str, ...]], float] = defaultdict(float)
        self.samples: dict[tuple[Histogram, tuple[str, ...]], list[float]] = defaultdict(list)

    def inc(self, metric: Counter, labels: tuple[str, ...], amount: float = 1.0) -> None:
        self.counts[metric, labels] += amount

    def observe(self, metric: Histogram, labels: tuple[str, ...], value: float) -> None:
        self.samples[metric, labels].append(value)

    def apply(self) -> None:
        for (counter, labels), amount in self.counts.items():
            counter.labels(*labels).inc(amount)
        for (histogram, labels), values in self.samples.items():
            child = histogram.labels(*labels)
            for value in values:
                child.observe(value)


def observations(events: Sequence[Event], state: RunState) -> Tally:
    """What ``events`` (just appended; ``state`` folded through them) add to the metrics.

    Computed inside the append's transaction and applied (:meth:`Tally.apply`) once it
    commits, so a rolled-back append counts nothing.
    """
    kind = state.run_kind or "primary"
    tally = Tally()
    for event in events:
        _observe_one(tally, event, kind, state)
    return tally


def _observe_one(tally: Tally, event: Event, kind: str, state: RunState) -> None:
    match event:
        case RunStarted():  # a fork opens with run.started too (then run.forked)
            tally.inc(RUNS_STARTED, (kind,))
        case RunCompleted() | RunFailed() | RunBlocked() | RunCancelled():
            tally.inc(RUNS_FINISHED, (kind, event.type.removeprefix("run.")))
            if state.started_at is not None:
                tally.observe(RUN_SECONDS, (kind,), max(0.0, event.at - state.started_at))
        case NodeCompleted() | NodeFailed():
            node_kind = _node_kind(state, event)
            status = "completed" if isinstance(event, NodeCompleted) else "failed"
            tally.inc(NODES, (kind, node_kind, status))
            tally.observe(NODE_SECONDS, (kind, node_kind), event.duration_ms / 1000)
        case NodeReused():  # a served node: completed, its calls reused (no latency)
            tally.inc(NODES, (kind, event.kind, "completed"))
            tally.observe(NODE_SECONDS, (kind, event.kind), 0.0)
            for action in event.actions:
                if isinstance(action, AgentAnswer):
                    _model_call(tally, kind, action.model, action.label, action.input_tokens,
                                action.output_tokens, action.cost_usd, 0.0)
                elif isinstance(action, ToolResult):
                    tally.inc(TOOL_CALLS, (kind, action.label))
        case AgentResponded():
            _model_call(tally, kind, event.model, event.label, event.input_tokens,
                        event.output_tokens, event.cost_usd, event.latency_ms)
        case ToolReturned():
            tally.inc(TOOL_CALLS, (kind, event.label))


def _model_call(tally: Tally, kind: str, model: str, label: str, input_tokens: int,
                output_tokens: int, cost_usd: float | None, latency_ms: float) -> None:
    tally.inc(MODEL_CALLS, (kind, model, label))
    tally.inc(MODEL_TOKENS, (kind, "input"), input_tokens)
    tally.inc(MODEL_TOKENS, (kind, "output"), output_tokens)
    tally.observe(MODEL_SECONDS, (kind,), latency_ms / 1000)
    if cost_usd:
        tally.inc(MODEL_COST, (kind, label), cost_usd)


def _node_kind(state: RunState, event: Event) -> str:
    for execution in reversed(state.executions):
        if execution.end_seq == event.seq or (execution.node == event.node
                                              and execution.occurrence == event.occurrence):
            return execution.kind
    return "unknown"


def exposition() -> tuple[bytes, str]:
    """The text exposition of every metric (all processes' under multiprocess mode)."""
    registry: Any = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        # prometheus_client leaves this constructor unannotated
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return generate_latest(registry), CONTENT_TYPE_LATEST
