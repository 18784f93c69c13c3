"""GenAI content that arrives as OTLP *log* records instead of on the spans.

The GenAI instrumentations can put a call's content in log events correlated to its span
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=EVENT_ONLY``: one
``gen_ai.client.inference.operation.details`` record carrying ``gen_ai.input.messages``,
``gen_ai.output.messages``, …; older versions: one ``gen_ai.user.message`` /
``gen_ai.choice`` … record per message). An app exports them to ``/v1/logs``.

:func:`read_otlp_logs_json` reads an ``ExportLogsServiceRequest`` (JSON form) into
:class:`LogEvent` records (the body, when an object, merged under the attributes);
:func:`attach` puts them on their spans: a details record's attributes fill in what the
span lacks, a per-message record becomes a span event — so the dialect reader sees the
content exactly as if the span had carried it. Records of no known span are left out.
"""

from __future__ import annotations

import binascii
import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from forklab.engine.canonical import canonical_json, fingerprint
from forklab.engine.traces.otlp import (
    OtlpDecodeError,
    Rejected,
    SpanEvent,
    SpanRecord,
    attributes_of,
    decode_message,
    hex_id,
    value_of,
)

DETAILS = "gen_ai.client.inference.operation.details"


@dataclass(frozen=True, kw_only=True, slots=True)
class LogEvent:
    trace_id: str
    span_id: str
    name: str
    time_ns: int
    attributes: dict[str, Any]

    @property
    def key(self) -> str:
        """The record's identity (a re-sent record is the same record)."""
        return fingerprint(self.to_wire())

    def to_wire(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def log_from_wire(data: dict[str, Any]) -> LogEvent:
    return LogEvent(trace_id=data["trace_id"], span_id=data["span_id"], name=data["name"],
                    time_ns=int(data["time_ns"]), attributes=dict(data["attributes"]))


def read_otlp_logs_json(data: Any) -> tuple[list[LogEvent], list[Rejected]]:
    """The span-correlated GenAI log records of an export, and those that could not be
    read. Records without a trace and span id, or not GenAI events, are skipped (not
    errors: an app's other logs share the endpoint). Raises :class:`OtlpDecodeError` when
    ``data`` is not an object with a ``resourceLogs`` list."""
    if not isinstance(data, dict) or not isinstance(data.get("resourceLogs"), list):
        raise OtlpDecodeError("expected an OTLP logs export: a JSON object with a "
                              "'resourceLogs' list")
    found: list[LogEvent] = []
    rejected: list[Rejected] = []
    for resource_logs in data["resourceLogs"]:
        for scope_logs in (resource_logs or {}).get("scopeLogs") or ():
            for raw in (scope_logs or {}).get("logRecords") or ():
                try:
                    event = _record(raw)
                except (KeyError, TypeError, ValueError, binascii.Error) as exc:
                    rejected.append(Rejected(None, None, f"unreadable log record: {exc}"))
                    continue
                if event is not None:
                    found.append(event)
    return found, rejected


def _record(raw: dict[str, Any]) -> LogEvent | None:
    attrs = attributes_of(raw.get("attributes"))
    name = str(raw.get("eventName") or attrs.pop("event.name", "") or "")
    if not name.startswith("gen_ai.") or not raw.get("traceId") or not raw.get("spanId"):
        return None
    body = value_of(raw.get("body") or {})
    if isinstance(body, dict):
        attrs = {**body, **attrs}
    elif body is not None:
        attrs.setdefault("content", body)
    return LogEvent(trace_id=hex_id(raw["traceId"], 16), span_id=hex_id(raw["spanId"], 8),
                    name=name,
                    time_ns=int(raw.get("timeUnixNano") or raw.get("observedTimeUnixNano") or 0),
                    attributes=attrs)


def attach(spans: Iterable[SpanRecord], events: Iterable[LogEvent]) -> list[SpanRecord]:
    """``spans`` with the log events of each put on it (see the module docstring); the
    events of one span in (time, name, content) order, so arrival order does not matter."""
    by_span: dict[str, list[LogEvent]] = defaultdict(list)
    for event in events:
        by_span[event.span_id].append(event)
    out = []
    for span in spans:
        mine = sorted(by_span.get(span.span_id, ()),
                      key=lambda e: (e.time_ns, e.name, canonical_json(e.attributes)))
        if not mine:
            out.append(span)
            continue
        attributes = dict(span.attributes)
        extra = []
        for event in mine:
            if event.name == DETAILS:
                for key, val in event.attributes.items():
                    attributes.setdefault(key, val)
            else:
                extra.append(SpanEvent(name=event.name, time_ns=event.time_ns,
                                       attributes=event.attributes))
        out.append(dataclasses.replace(span, attributes=attributes,
                                       events=(*span.events, *extra)))
    return out


def decode_logs_protobuf(body: bytes) -> dict[str, Any]:
    """An ``ExportLogsServiceRequest`` protobuf body as its JSON-mapping dict."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
        ExportLogsServiceRequest,
    )

    return decode_message(body, ExportLogsServiceRequest())


__all__ = ["DETAILS", "LogEvent", "attach", "decode_logs_protobuf", "log_from_wire",
           "read_otlp_logs_json"]
