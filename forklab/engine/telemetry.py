"""Tracing through the OpenTelemetry API (a no-op until an SDK and exporter are configured).

Spans: ``replay.fork`` around a fork's tail, ``workflow.run`` around the runner's loop, and
``node.execute.<kind>`` around each node, nested in that order (SPEC §3.11).
"""

from __future__ import annotations

from opentelemetry import trace

tracer = trace.get_tracer("forklab.engine")
