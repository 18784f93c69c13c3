"""Tracing through the OpenTelemetry API (a no-op until an SDK and exporter are configured).

Spans: ``replay.fork`` around a fork's tail, ``workflow.run`` around the runner's loop, and
``node.execute.<kind>`` around each node, nested in that order (SPEC §3.11).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from opentelemetry import trace

tracer = trace.get_tracer("forklab.engine")


def node_span(kind: str, node_id: str, run_id: str) -> AbstractContextManager[Any]:
    """The ``node.execute.<kind>`` span of one node — or nothing while no tracer provider
    is set (the API's proxy: its spans record nothing, yet making and entering one costs
    more than a cheap node's own work). Asked per node, so a provider set later is used from
    the next node on."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return nullcontext()
    return tracer.start_as_current_span(f"node.execute.{kind}",
                                        attributes={"node.id": node_id, "run.id": run_id})
