"""Tracing through the OpenTelemetry API (a no-op until an SDK and exporter are configured).

Spans: ``replay.fork`` around a fork's tail, ``workflow.run`` around the runner's loop, and
``node.execute.<kind>`` around each node, nested in that order (SPEC §3.11); under a node's
span, a ``chat {model}`` span per model call and an ``execute_tool {tool}`` span per tool
call the model asked for, in the OpenTelemetry GenAI conventions (SPEC §8 "Out"): usage,
the call key (``forklab.call.key``) and its provenance label (``forklab.call.label``);
message content only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is on (as
the instrumentations do), so a forklab run or fork opens in any tracer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from opentelemetry import trace
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

tracer = trace.get_tracer("forklab.engine")

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CALL_KEY = "forklab.call.key"
CALL_LABEL = "forklab.call.label"
RUN_ID = "forklab.run.id"


def tracing() -> bool:
    """Whether a tracer provider is set (else spans are not even made: see node_span)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def capture_content() -> bool:
    """The GenAI instrumentations' switch: ``true`` (or a span mode) captures content."""
    return os.environ.get(CAPTURE_CONTENT, "").strip().lower() in (
        "true", "span_only", "span_and_event")


def node_span(kind: str, node_id: str, run_id: str) -> AbstractContextManager[Any]:
    """The ``node.execute.<kind>`` span of one node — or nothing while no tracer provider
    is set (the API's proxy: its spans record nothing, yet making and entering one costs
    more than a cheap node's own work). Asked per node, so a provider set later is used from
    the next node on."""
    if not tracing():
        return nullcontext()
    return tracer.start_as_current_span(f"node.execute.{kind}",
                                        attributes={"node.id": node_id, "run.id": run_id})


def call_span(name: str, start_ns: int, end_ns: int, attributes: dict[str, Any],
              content: Callable[[], dict[str, Any]] | None = None,
              error: str | None = None) -> None:
    """One finished call's span under the current (node) span, timed after the fact.
    ``content`` makes the message attributes, asked only when capture is on."""
    if not tracing():
        return
    values = {k: v for k, v in attributes.items() if v is not None}
    if content is not None and capture_content():
        values.update({k: v for k, v in content().items() if v is not None})
    span = tracer.start_span(name, start_time=start_ns, attributes=values,
                             kind=trace.SpanKind.CLIENT if name.startswith("chat ")
                             else trace.SpanKind.INTERNAL)
    if error is not None:
        span.set_status(trace.Status(trace.StatusCode.ERROR, error))
    span.end(end_time=max(end_ns, start_ns))


def chat_attributes(*, run_id: str, key: str, provider: str, model: str, temperature: float,
                    label: str, input_tokens: int = 0, output_tokens: int = 0,
                    finish_reason: str | None = None,
                    cost_usd: float | None = None) -> dict[str, Any]:
    """A ``chat {model}`` span's attributes (no content)."""
    return {ga.GEN_AI_OPERATION_NAME: "chat", ga.GEN_AI_PROVIDER_NAME: provider,
            ga.GEN_AI_REQUEST_MODEL: model, ga.GEN_AI_REQUEST_TEMPERATURE: float(temperature),
            ga.GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
            ga.GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
            ga.GEN_AI_RESPONSE_FINISH_REASONS: [finish_reason] if finish_reason else None,
            CALL_KEY: key, CALL_LABEL: label, RUN_ID: run_id, "forklab.cost_usd": cost_usd}


def tool_attributes(*, run_id: str, key: str, tool: str, call_id: str | None,
                    label: str | None) -> dict[str, Any]:
    """An ``execute_tool {tool}`` span's attributes (no arguments or result)."""
    return {ga.GEN_AI_OPERATION_NAME: "execute_tool", ga.GEN_AI_TOOL_NAME: tool,
            ga.GEN_AI_TOOL_CALL_ID: call_id, CALL_KEY: key, CALL_LABEL: label,
            RUN_ID: run_id}


def as_text(value: Any) -> str:
    """A value as an attribute's text (JSON unless it is text already)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
