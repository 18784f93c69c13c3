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
from collections.abc import Callable, Sequence
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

Observation = Callable[[], None]


def observations(events: Sequence[Event], state: RunState) -> list[Observation]:
    """What ``events`` (just appended; ``state`` folded through them) add to the metrics.

    Computed inside the append's transaction and applied once it commits, so a rolled-back
    append counts nothing.
    """
    kind = state.run_kind or "primary"
    found: list[Observation] = []
    for event in events:
        found.extend(_observe_one(event, kind, state))
    return found


def _observe_one(event: Event, kind: str, state: RunState) -> list[Observation]:
    match event:
        case RunStarted():  # a fork opens with run.started too (then run.forked)
            return [RUNS_STARTED.labels(kind).inc]
        case RunCompleted() | RunFailed() | RunBlocked() | RunCancelled():
            status = event.type.removeprefix("run.")
            found: list[Observation] = [RUNS_FINISHED.labels(kind, status).inc]
            if state.started_at is not None:
                seconds = max(0.0, event.at - state.started_at)
                found.append(lambda: RUN_SECONDS.labels(kind).observe(seconds))
            return found
        case NodeCompleted() | NodeFailed():
            node_kind = _node_kind(state, event)
            status = "completed" if isinstance(event, NodeCompleted) else "failed"
            seconds = event.duration_ms / 1000
            return [NODES.labels(kind, node_kind, status).inc,
                    lambda: NODE_SECONDS.labels(kind, node_kind).observe(seconds)]
        case NodeReused():  # a served node: completed, its calls reused (no latency)
            return _reused(event, kind)
        case AgentResponded():
            return _model_call(event, kind)
        case ToolReturned():
            return [TOOL_CALLS.labels(kind, event.label).inc]
    return []


def _reused(event: NodeReused, kind: str) -> list[Observation]:
    found: list[Observation] = [NODES.labels(kind, event.kind, "completed").inc,
                                lambda: NODE_SECONDS.labels(kind, event.kind).observe(0.0)]
    for action in event.actions:
        if isinstance(action, AgentAnswer):
            found.extend(_model_call(AgentResponded(
                run_id=event.run_id, seq=event.seq, at=event.at, node=event.node,
                role=action.role, index=action.index, model=action.model, text="",
                input_tokens=action.input_tokens, output_tokens=action.output_tokens,
                cost_usd=action.cost_usd, latency_ms=0.0, label=action.label,
                request_hash=action.request_hash), kind))
        elif isinstance(action, ToolResult):
            found.append(TOOL_CALLS.labels(kind, action.label).inc)
    return found


def _model_call(event: AgentResponded, kind: str) -> list[Observation]:
    found: list[Observation] = [
        MODEL_CALLS.labels(kind, event.model, event.label).inc,
        lambda: MODEL_TOKENS.labels(kind, "input").inc(event.input_tokens),
        lambda: MODEL_TOKENS.labels(kind, "output").inc(event.output_tokens),
        lambda: MODEL_SECONDS.labels(kind).observe(event.latency_ms / 1000),
    ]
    if event.cost_usd:
        cost = event.cost_usd
        found.append(lambda: MODEL_COST.labels(kind, event.label).inc(cost))
    return found


def _node_kind(state: RunState, event: Event) -> str:
    for execution in reversed(state.executions):
        if execution.end_seq == event.seq or (execution.node == event.node
                                              and execution.occurrence == event.occurrence):
            return execution.kind
    return "unknown"


def apply(found: list[Observation]) -> None:
    for observe in found:
        observe()


def exposition() -> tuple[bytes, str]:
    """The text exposition of every metric (all processes' under multiprocess mode)."""
    registry: Any = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        # prometheus_client leaves this constructor unannotated
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return generate_latest(registry), CONTENT_TYPE_LATEST
