"""OTLP trace data read into plain span records (SPEC §8 "In").

Two doors, one result: :func:`read_otlp_json` reads an ``ExportTraceServiceRequest`` in its
JSON form (OTLP/HTTP JSON: hex ids, or the protobuf JSON mapping's base64 ids — both are
accepted, told apart by length), and :func:`decode_protobuf` decodes the binary protobuf
body with the official ``opentelemetry-proto`` messages into that same JSON form.

Invariants:
- a span record holds only what the wire said: attribute values decoded to Python
  (``intValue`` to int, arrays to lists, ``kvlistValue`` to dicts), nothing inferred;
- reading is deterministic: the same body gives equal records in the same order;
- a body that is not an OTLP trace export raises :class:`OtlpDecodeError` (a 400 at the
  receiver); a single malformed span is skipped and reported in ``rejected``.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.errors import ForklabError


class OtlpDecodeError(ForklabError):
    code = "invalid_otlp"


@dataclass(frozen=True, kw_only=True, slots=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class SpanRecord:
    """One span as received: hex ids, nanosecond times, decoded attributes."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    status_code: int = 0  # 0 unset, 1 ok, 2 error
    status_message: str = ""
    scope: str = ""
    resource: dict[str, Any] = field(default_factory=dict)

    @property
    def is_error(self) -> bool:
        return self.status_code == 2

    def to_wire(self) -> dict[str, Any]:
        """A JSON-ready form (what the receiver stores, :func:`span_from_wire` reads)."""
        return {"trace_id": self.trace_id, "span_id": self.span_id,
                "parent_id": self.parent_id, "name": self.name, "start_ns": self.start_ns,
                "end_ns": self.end_ns, "attributes": self.attributes,
                "events": [{"name": e.name, "time_ns": e.time_ns, "attributes": e.attributes}
                           for e in self.events],
                "status_code": self.status_code, "status_message": self.status_message,
                "scope": self.scope, "resource": self.resource}


def span_from_wire(data: dict[str, Any]) -> SpanRecord:
    """The record :meth:`SpanRecord.to_wire` wrote."""
    return SpanRecord(
        trace_id=data["trace_id"], span_id=data["span_id"], parent_id=data.get("parent_id"),
        name=data["name"], start_ns=int(data["start_ns"]), end_ns=int(data["end_ns"]),
        attributes=dict(data.get("attributes") or {}),
        events=tuple(SpanEvent(name=e["name"], time_ns=int(e["time_ns"]),
                               attributes=dict(e.get("attributes") or {}))
                     for e in data.get("events") or ()),
        status_code=int(data.get("status_code", 0)),
        status_message=data.get("status_message", ""), scope=data.get("scope", ""),
        resource=dict(data.get("resource") or {}))


@dataclass(frozen=True, slots=True)
class Rejected:
    """A span that could not be read or mapped, and why."""

    span_id: str | None
    name: str | None
    reason: str


def decode_protobuf(body: bytes) -> dict[str, Any]:
    """An ``ExportTraceServiceRequest`` protobuf body as its JSON-mapping dict; raises
    :class:`OtlpDecodeError` when the bytes are not one."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    return decode_message(body, ExportTraceServiceRequest())


def decode_message(body: bytes, message: Any) -> dict[str, Any]:
    """``body`` parsed into the empty protobuf ``message`` (an OTLP export request), as its
    JSON-mapping dict; :class:`OtlpDecodeError` naming the message type when it is not one."""
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError

    try:
        message.ParseFromString(body)
    except (DecodeError, ValueError) as exc:
        raise OtlpDecodeError(
            f"the body is not an OTLP {type(message).__name__}: {exc}") from None
    decoded: dict[str, Any] = MessageToDict(message)
    return decoded


def read_otlp_json(data: Any) -> tuple[list[SpanRecord], list[Rejected]]:
    """The spans of an ``ExportTraceServiceRequest`` JSON object, in body order, and the
    spans that could not be read. Raises :class:`OtlpDecodeError` when ``data`` is not an
    object with a ``resourceSpans`` list."""
    if not isinstance(data, dict) or not isinstance(
            data.get("resourceSpans", data.get("resource_spans")), list):
        raise OtlpDecodeError("expected an OTLP trace export: a JSON object with a "
                              "'resourceSpans' list")
    spans: list[SpanRecord] = []
    rejected: list[Rejected] = []
    for resource_spans in data.get("resourceSpans", data.get("resource_spans")) or ():
        if not isinstance(resource_spans, dict):
            raise OtlpDecodeError("resourceSpans: each item must be an object")
        resource = attributes_of((resource_spans.get("resource") or {}).get("attributes"))
        for scope_spans in resource_spans.get("scopeSpans") or ():
            scope = str(((scope_spans or {}).get("scope") or {}).get("name", ""))
            for raw in (scope_spans or {}).get("spans") or ():
                try:
                    spans.append(_span(raw, scope, resource))
                except (KeyError, TypeError, ValueError, binascii.Error) as exc:
                    name = raw.get("name") if isinstance(raw, dict) else None
                    rejected.append(Rejected(None, name, f"unreadable span: {exc}"))
    return spans, rejected


def _span(raw: dict[str, Any], scope: str, resource: dict[str, Any]) -> SpanRecord:
    parent = raw.get("parentSpanId") or None
    status = raw.get("status") or {}
    code = status.get("code", 0)
    if isinstance(code, str):
        code = {"STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}.get(code, 0)
    return SpanRecord(
        trace_id=hex_id(raw["traceId"], 16), span_id=hex_id(raw["spanId"], 8),
        parent_id=hex_id(parent, 8) if parent else None, name=str(raw.get("name", "")),
        start_ns=int(raw.get("startTimeUnixNano", 0)),
        end_ns=int(raw.get("endTimeUnixNano", 0)),
        attributes=attributes_of(raw.get("attributes")),
        events=tuple(SpanEvent(name=str(e.get("name", "")),
                               time_ns=int(e.get("timeUnixNano", 0)),
                               attributes=attributes_of(e.get("attributes")))
                     for e in raw.get("events") or ()),
        status_code=int(code), status_message=str(status.get("message", "")), scope=scope,
        resource=resource)


def hex_id(value: Any, size: int) -> str:
    """An id as lower-case hex: OTLP JSON writes hex, the protobuf JSON mapping base64."""
    text = str(value)
    if len(text) == size * 2:
        bytes.fromhex(text)  # raises ValueError when it is not hex
        return text.lower()
    decoded = base64.b64decode(text, validate=True)
    if len(decoded) != size:
        raise ValueError(f"an id of {size} bytes expected, got {text!r}")
    return decoded.hex()


def attributes_of(items: Any) -> dict[str, Any]:
    return {str(item["key"]): value_of(item.get("value") or {}) for item in items or ()}


def value_of(value: dict[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [value_of(v) for v in (value["arrayValue"] or {}).get("values") or ()]
    if "kvlistValue" in value:
        return attributes_of((value["kvlistValue"] or {}).get("values"))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


__all__ = ["OtlpDecodeError", "Rejected", "SpanEvent", "SpanRecord", "attributes_of",
           "decode_protobuf", "hex_id", "read_otlp_json", "span_from_wire", "value_of"]
