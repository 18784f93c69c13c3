"""``POST /v1/traces``: the OTLP/HTTP trace receiver (and ``POST /v1/logs`` for GenAI
content sent as log events), and ``POST /api/v1/imports/``: an OTLP JSON file imported
through the REST API (SPEC §8 "In").

An app points ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` at ``https://forklab…/v1/traces`` with
``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Token <key>``. Bodies: protobuf
(``application/x-protobuf``) or JSON (``application/json``), optionally gzipped; the answer
is an ``ExportTraceServiceResponse`` in the body's encoding, whose ``partial_success``
counts the spans that could not be mapped. A body that cannot be parsed is a 400; nothing
is stored then.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)
from rest_framework import status
from rest_framework.decorators import api_view
from rest_framework.exceptions import Throttled
from rest_framework.request import Request
from rest_framework.response import Response

from forklab.api.schema import WRITE, responses
from forklab.engine.errors import ForklabError
from forklab.engine.traces import OtlpDecodeError, decode_protobuf, read_otlp_json
from forklab.engine.traces.logs import decode_logs_protobuf, read_otlp_logs_json
from forklab.runs.models import Run
from forklab.runs.serializers_json import runs_to_json
from forklab.runs.traces import (
    ReceiverBusy,
    import_document,
    import_log_events,
    import_spans,
    receiving,
    receiving_project,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class UnsupportedMediaType(ForklabError):
    code = "unsupported_media_type"


@extend_schema(exclude=True)  # OTLP/HTTP, not the REST API: its schema is OpenTelemetry's
@api_view(["POST"])
def traces(request: Request) -> HttpResponse:
    project = receiving_project(request.user, request.headers.get("X-Forklab-Project"))
    with receiving():  # the backlog's mapping waits for it
        kind, data = _body(request, decode_protobuf)
        spans, unreadable = read_otlp_json(data)
        with _back_pressure():
            result = import_spans(user=request.user, project=project, spans=spans,
                                  unreadable=unreadable, defer=True)
    answer = ExportTraceServiceResponse()
    if result.rejected:
        answer.partial_success.CopyFrom(ExportTracePartialSuccess(
            rejected_spans=len(result.rejected), error_message=result.error_message))
    return _answer(kind, answer)


@extend_schema(exclude=True)
@api_view(["POST"])
def logs(request: Request) -> HttpResponse:
    """``POST /v1/logs``: GenAI content sent as log events (EVENT_ONLY), put on its spans;
    an app's other log records are accepted and dropped."""
    project = receiving_project(request.user, request.headers.get("X-Forklab-Project"))
    with receiving():
        kind, data = _body(request, decode_logs_protobuf)
        events, unreadable = read_otlp_logs_json(data)
        with _back_pressure():
            result = import_log_events(user=request.user, project=project, events=events,
                                       unreadable=unreadable)
    answer = ExportLogsServiceResponse()
    if result.rejected:
        answer.partial_success.CopyFrom(ExportLogsPartialSuccess(
            rejected_log_records=len(result.rejected), error_message=result.error_message))
    return _answer(kind, answer)


@contextmanager
def _back_pressure() -> Iterator[None]:
    """A busy receiver answers 429 with ``Retry-After``: OTLP exporters retry it."""
    try:
        yield
    except ReceiverBusy as exc:
        raise Throttled(wait=exc.retry_after, detail=exc.message) from None


def _body(request: Request, decode: Callable[[bytes], dict[str, Any]]) -> tuple[str, Any]:
    """The body's kind (protobuf or JSON) and its JSON-form content; 415 for another
    content type, 400 ``invalid_otlp`` when it cannot be parsed."""
    kind = (request.content_type or "").split(";")[0].strip().lower()
    if kind not in (PROTOBUF, JSON):
        raise UnsupportedMediaType(
            f"Content-Type {kind or 'none'!r} is not OTLP/HTTP: send {PROTOBUF} or {JSON}")
    raw = _decoded(request.body, request.headers.get("Content-Encoding", ""))
    if kind == PROTOBUF:
        return kind, decode(raw)
    try:
        return kind, json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise OtlpDecodeError(f"the body is not JSON: {exc}") from None


def _answer(kind: str, answer: Message) -> HttpResponse:
    """The OTLP response in the request's encoding."""
    if kind == PROTOBUF:
        return HttpResponse(answer.SerializeToString(), content_type=PROTOBUF)
    return HttpResponse(json.dumps(MessageToDict(answer)), content_type=JSON)


def _decoded(body: bytes, encoding: str) -> bytes:
    """The body without its ``Content-Encoding`` (gzip or none), at most the body limit."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise UnsupportedMediaType(f"Content-Encoding {encoding!r}: send gzip or none")
    limit = int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0) or 64 * 1024 * 1024
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpDecodeError(f"the body is not valid gzip: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise OtlpDecodeError(f"the body inflates past the {limit}-byte limit")
    return out


@extend_schema(
    operation_id="imports_create", request=dict, summary="Import an OTLP JSON trace export",
    description="The body is an OTLP `ExportTraceServiceRequest` in JSON (what an "
                "OpenTelemetry file exporter writes) or a Langfuse trace export (a trace "
                "with its `observations`, a list of them, or `{data: [...]}`); each trace "
                "becomes (or updates) a run, "
                "as `POST /v1/traces` does. The project is the `X-Forklab-Project` header, "
                "else your first project. Answers `{runs: [Run], rejected_spans, "
                "error_message}`. Needs the member role.",
    responses=responses({201: dict}, *WRITE))
@api_view(["POST"])
def imports(request: Request) -> Response:
    project = receiving_project(request.user, request.headers.get("X-Forklab-Project"))
    result = import_document(user=request.user, project=project, data=request.data)
    runs = {r.pk: r for r in Run.objects.filter(pk__in=result.runs).select_related("project")}
    body = {**result.to_json(), "runs": runs_to_json(runs[r] for r in result.runs if r in runs)}
    return Response(body, status=status.HTTP_201_CREATED)
