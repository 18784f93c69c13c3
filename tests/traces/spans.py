"""Real spans for the importer's tests: the official ``openai`` client, instrumented by the
real instrumentation packages, talking to the vendor stub; exported through the SDK's own
OTLP encoder, so a test maps exactly the body an app would send."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import openai
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.vendor_stub import VendorStub

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
SYSTEM = "You are a weather assistant."
QUESTION = "Weather in Paris?"


@contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _instrumentor(dialect: str) -> Any:
    if dialect == "genai":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
        return OpenAIInstrumentor()
    from openinference.instrumentation.openai import OpenAIInstrumentor as OIInstrumentor
    return OIInstrumentor()


def tool_conversation(stub: VendorStub, dialect: str, env: dict[str, str],
                      *, tools: bool = True) -> ExportTraceServiceRequest:
    """An agent span around a tool-calling conversation (two turns and the tool between
    them, in an app span), traced by ``dialect``'s instrumentor with ``env`` set; the
    spans as the OTLP export request the SDK's exporter would send."""
    return traced(stub, dialect, env, tools=tools)[0]


def traced(stub: VendorStub, dialect: str, env: dict[str, str], *, tools: bool = True
           ) -> tuple[ExportTraceServiceRequest, ExportLogsServiceRequest]:
    """:func:`tool_conversation`'s spans, and the log records the instrumentor emitted
    (the GenAI content in ``EVENT_ONLY`` mode), as the OTLP requests an app sends."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    instrumentor = _instrumentor(dialect)
    with _env(env):
        instrumentor.instrument(tracer_provider=provider, logger_provider=logger_provider)
        try:
            _converse(stub, provider, tools)
        finally:
            instrumentor.uninstrument()
    return encode_spans(exporter.get_finished_spans()), encode_logs(logs.get_finished_logs())


def _converse(stub: VendorStub, provider: TracerProvider, tools: bool) -> None:
    client = openai.OpenAI(base_url=stub.openai_base_url, api_key="x", max_retries=0)
    tracer = provider.get_tracer("weather-app")
    offered: Any = {"tools": [WEATHER]} if tools else {}
    with tracer.start_as_current_span("weather agent"):
        messages: list[Any] = [{"role": "system", "content": SYSTEM},
                               {"role": "user", "content": QUESTION}]
        first = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                               temperature=0.2, **offered)
        reply = first.choices[0].message
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls or ():
            with tracer.start_as_current_span("get_weather"):
                messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
        if reply.tool_calls:
            client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                           temperature=0.2, **offered)


GENAI_CONTENT = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
                 "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"}
GENAI_EVENTS = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "EVENT_ONLY"}
GENAI_NO_CONTENT = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
                    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "NO_CONTENT"}
OPENINFERENCE_HIDDEN = {"OPENINFERENCE_HIDE_INPUTS": "true",
                        "OPENINFERENCE_HIDE_OUTPUTS": "true"}


def handmade(*, reply: str = "It is sunny.", unmappable: bool = False,
             late: bool = False) -> tuple[ExportTraceServiceRequest, ExportTraceServiceRequest]:
    """One trace made with the SDK's tracer (no client): an agent span with a GenAI chat
    span (content captured) — and, with ``unmappable``, a chat span without a model. The
    second request holds a span that arrives late (a second turn) when ``late``."""
    import json as _json

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    content = {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.provider.name": "openai", "gen_ai.usage.input_tokens": 20,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.input.messages": _json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": QUESTION}]}]),
        "gen_ai.output.messages": _json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": reply}],
              "finish_reason": "stop"}])}
    with tracer.start_as_current_span("weather agent"):
        with tracer.start_as_current_span("chat gpt-4o-mini", attributes=content):
            pass
        if unmappable:
            with tracer.start_as_current_span("chat", attributes={
                    "gen_ai.operation.name": "chat"}):
                pass
        if late:
            with tracer.start_as_current_span("chat gpt-4o-mini", attributes=content):
                pass
    finished = list(exporter.get_finished_spans())
    late_spans = [finished[-2]] if late else []
    early = [s for s in finished if s not in late_spans]
    return encode_spans(early), encode_spans(late_spans)


def traced_workflow(stub: VendorStub, fn: Any, arguments: dict[str, Any], *,
                    name: str, env: dict[str, str] | None = None,
                    agent_span: bool = True) -> ExportTraceServiceRequest:
    """``fn`` (a ``@forklab.workflow``) run OUTSIDE forklab as a team runs it: the official
    ``openai`` client instrumented by openinference-instrumentation-openai (``env`` set),
    the call wrapped in an AGENT span named ``name`` by OpenInference's own ``tracer.agent``
    decorator (which records the arguments as ``input.value`` and the result as
    ``output.value``) — or, with ``agent_span=False``, a plain span of that name recording
    neither. The spans as the OTLP export request the SDK's exporter would send."""
    from openinference.instrumentation import OITracer, TraceConfig

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = _instrumentor("openinference")
    values = {"OPENAI_BASE_URL": stub.openai_base_url, "OPENAI_API_KEY": "sk-app",
              "OPENAI_MAX_RETRIES": "0", **(env or {})}
    with _env(values):
        instrumentor.instrument(tracer_provider=provider)
        try:
            if agent_span:
                tracer = OITracer(provider.get_tracer("app"), config=TraceConfig())
                tracer.agent(name=name)(fn)(**arguments)
            else:
                with provider.get_tracer("app").start_as_current_span(name):
                    fn(**arguments)
        finally:
            instrumentor.uninstrument()
    return encode_spans(exporter.get_finished_spans())
