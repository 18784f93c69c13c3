"""Logging and tracing set-up (SPEC §3.11); metrics live in ``forklab.runs.metrics``.

- :func:`structured_formatter` is the ``LOGGING`` formatter: stdlib records (Django's, the
  engine's) rendered by structlog as one JSON object per line (or ``key=value`` pairs), with
  the record's ``extra={...}`` fields as keys.
- :func:`configure_tracing` installs an OpenTelemetry SDK tracer provider exporting over
  OTLP/HTTP, only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; the SDK and exporter (the
  ``otel`` extra) are imported only then, so the embedded default needs neither. Without it the
  engine's spans go to the API's no-op tracer.
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("forklab.runs.observability")
_configured = False


def structured_formatter(renderer: str = "json") -> logging.Formatter:
    import structlog

    pre_chain: list[Any] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    final: Any = (structlog.processors.JSONRenderer(sort_keys=False) if renderer == "json"
                  else structlog.processors.KeyValueRenderer(
                      key_order=["timestamp", "level", "logger", "event"], drop_missing=True))
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=pre_chain,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, final],
    )


def configure_tracing(endpoint: str | None = None) -> bool:
    """Export spans over OTLP/HTTP when an endpoint is configured; True if configured.

    Idempotent. The exporter reads the standard ``OTEL_EXPORTER_OTLP_*`` variables (headers,
    timeout); the service name is ``OTEL_SERVICE_NAME`` or ``forklab``.
    """
    global _configured
    endpoint = endpoint if endpoint is not None else os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT", "")
    if not endpoint or _configured:
        return _configured
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not "
                    "installed; install forklab[otel]. Traces are not exported.")
        return False
    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", "forklab")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _configured = True
    log.info("tracing.configured", extra={"otlp_endpoint": endpoint})
    return True
