"""``POST /v1/logs``: GenAI content sent as log events (openai-v2 in EVENT_ONLY mode) joins
its spans' run, whichever arrives first."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

from forklab.runs.models import Event, Run
from tests.api.conftest import World
from tests.traces.spans import GENAI_EVENTS, QUESTION, traced
from tests.vendor_stub import VendorStub
from tests.vendor_stub.fixtures import server, stub

__all__ = ["server", "stub"]

pytestmark = pytest.mark.django_db
PROTOBUF = "application/x-protobuf"


def _post(world: World, path: str, body: bytes, content_type: str = PROTOBUF) -> Any:
    return world.client("member").post(path, data=body, content_type=content_type,
                                       headers={"X-Forklab-Project": "lab"})


def _requested(run: Run) -> dict[str, Any]:
    event = Event.objects.get(run=run, type="agent.requested")
    payload: dict[str, Any] = event.payload
    return payload


def _trace_id(request: Any) -> str:
    return request.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()


@pytest.mark.parametrize("logs_first", [False, True])
def test_content_sent_as_log_events_joins_its_spans_run(
        world: World, stub: VendorStub, logs_first: bool) -> None:
    spans, logs = traced(stub, "genai", GENAI_EVENTS, tools=False)
    sends = [("/v1/traces", spans), ("/v1/logs", logs)]
    for path, request in (reversed(sends) if logs_first else sends):
        response = _post(world, path, request.SerializeToString())
        assert response.status_code == 200, response.content
    answer = ExportLogsServiceResponse.FromString(
        _post(world, "/v1/logs", logs.SerializeToString()).content)  # a re-send: no change
    assert not answer.HasField("partial_success")
    run = Run.objects.get(trace_id=_trace_id(spans))
    assert _requested(run)["messages"] == [{"role": "user", "content": QUESTION}]
    imported = Event.objects.get(run=run, type="trace.imported").payload
    assert [c["replayable"] for c in imported["calls"]] == [True]


def test_other_log_records_are_accepted_and_dropped(world: World) -> None:
    body = {"resourceLogs": [{"scopeLogs": [{"logRecords": [
        {"body": {"stringValue": "GET /health 200"}, "timeUnixNano": "1"}]}]}]}
    response = _post(world, "/v1/logs", json.dumps(body).encode(), "application/json")
    assert response.status_code == 200 and response.json() == {}


def test_a_logs_body_that_cannot_be_parsed_is_a_400(world: World) -> None:
    response = _post(world, "/v1/logs", b'{"resourceSpans": []}', "application/json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_otlp"
