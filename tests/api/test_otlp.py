"""``POST /v1/traces``: the OTLP/HTTP receiver (SPEC §8 "In") — protobuf and JSON bodies,
gzip, token auth, project header, roles, idempotent re-sends, late spans, partial success."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from forklab.runs.models import Event, Run, TraceSpan
from tests.api.conftest import API, World
from tests.traces.spans import handmade

pytestmark = pytest.mark.django_db

URL = "/v1/traces"
PROTOBUF = "application/x-protobuf"


def _post(world: World, who: str | None, body: bytes, content_type: str = PROTOBUF,
          **headers: str) -> Any:
    return world.client(who).post(URL, data=body, content_type=content_type,
                                  headers={"X-Forklab-Project": "lab", **headers})


def _trace_id(request: Any) -> str:
    return request.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()


def test_a_protobuf_export_becomes_a_run_found_by_its_trace_id(world: World) -> None:
    request, _ = handmade()
    response = _post(world, "member", request.SerializeToString())
    assert response.status_code == 200 and response["Content-Type"] == PROTOBUF
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert not answer.HasField("partial_success")
    found = world.client("viewer").get(f"{API}/runs/?trace_id={_trace_id(request)}").json()
    (run,) = found["results"]
    assert (run["status"], run["label"], run["project"]) == ("completed", "weather agent", "lab")
    assert run["memory"] == {"weather_agent": "It is sunny."}
    assert run["cost"]["input_tokens"] == 20 and run["cost"]["usd"] > 0
    events = world.client("viewer").get(f"{API}/runs/{run['id']}/events/").json()["results"]
    imported = next(e for e in events if e["type"] == "trace.imported")
    assert imported["payload"]["trace_id"] == _trace_id(request)
    assert imported["payload"]["calls"][0]["replayable"] is True


def test_a_gzipped_json_export_is_read_the_same(world: World) -> None:
    request, _ = handmade(reply="Rain.")
    body = gzip.compress(json.dumps(MessageToDict(request)).encode())
    response = _post(world, "member", body, "application/json", **{"Content-Encoding": "gzip"})
    assert response.status_code == 200 and response.json() == {}
    run = Run.objects.get(trace_id=_trace_id(request))
    assert run.memory == {"weather_agent": "Rain."}


def test_re_sending_a_trace_changes_nothing(world: World) -> None:
    request, _ = handmade()
    body = request.SerializeToString()
    assert _post(world, "member", body).status_code == 200
    run = Run.objects.get(trace_id=_trace_id(request))
    before = list(Event.objects.filter(run=run).values_list("id", "seq", "type"))
    assert _post(world, "member", body).status_code == 200
    assert list(Event.objects.filter(run=run).values_list("id", "seq", "type")) == before
    assert TraceSpan.objects.filter(trace_id=_trace_id(request)).count() == 2


def test_late_spans_extend_the_run(world: World) -> None:
    early, late = handmade(late=True)
    assert _post(world, "member", early.SerializeToString()).status_code == 200
    run = Run.objects.get(trace_id=_trace_id(early))
    assert _post(world, "member", late.SerializeToString()).status_code == 200
    again = Run.objects.get(pk=run.pk)
    assert again.created_at == run.created_at
    calls = [e.payload.get("call") for e in Event.objects.filter(run=again, type="agent.requested")]
    assert calls == [None, "turn:2"]
    assert again.input_tokens == 40 and again.status == "completed"


def test_unmappable_spans_are_counted_in_partial_success(world: World) -> None:
    request, _ = handmade(unmappable=True)
    response = _post(world, "member", json.dumps(MessageToDict(request)).encode(),
                     "application/json")
    assert response.status_code == 200
    assert response.json() == {"partialSuccess": {
        "rejectedSpans": "1",
        "errorMessage": "a chat span without gen_ai.request.model"}}
    assert Run.objects.filter(trace_id=_trace_id(request)).exists()


@pytest.mark.parametrize(("body", "content_type", "headers"), [
    (b"\xff\x00not protobuf", PROTOBUF, {}),
    (b"{not json", "application/json", {}),
    (b'{"resourceSpans": 3}', "application/json", {}),
    (b"not gzip", PROTOBUF, {"Content-Encoding": "gzip"}),
])
def test_a_body_that_cannot_be_parsed_is_a_400_and_stores_nothing(
        world: World, body: bytes, content_type: str, headers: dict[str, str]) -> None:
    spans = TraceSpan.objects.count()
    response = _post(world, "member", body, content_type, **headers)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_otlp"
    assert TraceSpan.objects.count() == spans


def test_a_viewer_cannot_import_and_a_stranger_must_authenticate(world: World) -> None:
    body = handmade()[0].SerializeToString()
    response = _post(world, "viewer", body)
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    assert _post(world, None, body).status_code == 401
    assert not TraceSpan.objects.exists()


def test_without_the_project_header_the_users_default_project_is_used(world: World) -> None:
    request, _ = handmade()
    response = world.client("member").post(URL, data=request.SerializeToString(),
                                           content_type=PROTOBUF)
    assert response.status_code == 200
    assert Run.objects.get(trace_id=_trace_id(request)).project.slug == "lab"


def test_another_content_type_is_refused(world: World) -> None:
    response = _post(world, "member", b"x", "text/plain")
    assert response.status_code == 415


def test_the_run_page_shows_an_imported_run_and_its_inspect_only_calls(world: World) -> None:
    from django.test import Client

    request, _ = handmade()
    for span in request.resource_spans[0].scope_spans[0].spans:  # content not captured
        kept = [a for a in span.attributes if a.key not in (
            "gen_ai.input.messages", "gen_ai.output.messages")]
        del span.attributes[:]
        span.attributes.extend(kept)
    assert _post(world, "member", request.SerializeToString()).status_code == 200
    run = Run.objects.get(trace_id=_trace_id(request))
    browser = Client()
    browser.force_login(world.users["member"])
    response = browser.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert f"imported from trace <code>{_trace_id(request)}</code>" in html
    assert "inspect-only" in html and "request messages, reply not captured" in html
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in html


def test_the_imports_endpoint_takes_an_otlp_json_export(world: World) -> None:
    request, _ = handmade(unmappable=True)
    response = world.client("member").post(
        f"{API}/imports/", data=MessageToDict(request), content_type="application/json",
        headers={"X-Forklab-Project": "lab"})
    assert response.status_code == 201
    body = response.json()
    assert (body["rejected_spans"], body["error_message"]) == (
        1, "a chat span without gen_ai.request.model")
    (run,) = body["runs"]
    assert (run["status"], run["project"], run["label"]) == ("completed", "lab", "weather agent")
    refused = world.client("viewer").post(
        f"{API}/imports/", data=MessageToDict(request), content_type="application/json",
        headers={"X-Forklab-Project": "lab"})
    assert refused.status_code == 403


def test_a_run_exported_as_otlp_imports_back_into_a_run_with_the_same_calls(
        world: World) -> None:
    exported = world.client("viewer").get(f"{API}/runs/{world.lab_diamond}/otlp/")
    assert exported.status_code == 200
    document = exported.json()
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert {s["name"] for s in spans} >= {"plan", "join"}
    imported = world.client("member").post(f"{API}/imports/", data=document,
                                           content_type="application/json",
                                           headers={"X-Forklab-Project": "lab"})
    assert imported.status_code == 201
    (run,) = imported.json()["runs"]
    original = world.client("viewer").get(f"{API}/runs/{world.lab_diamond}/").json()
    assert [(p["node"], p["status"]) for p in run["path"]] == [
        (p["node"], p["status"]) for p in original["path"]]
    assert run["cost"]["input_tokens"] == original["cost"]["input_tokens"]


def test_a_project_you_are_not_in_is_not_found_and_not_named(world: World) -> None:
    body = handmade()[0].SerializeToString()
    response = _post(world, "member", body, **{"X-Forklab-Project": "demo"})
    assert response.status_code == 404
    assert response.json()["detail"] == "no project 'demo' among yours (X-Forklab-Project)"


def test_runs_of_one_conversation_are_found_together(world: World) -> None:
    ids = []
    for reply in ("one", "two"):
        request, _ = handmade(reply=reply)
        span = request.resource_spans[0].scope_spans[0].spans[0]
        attribute = span.attributes.add()
        attribute.key = "gen_ai.conversation.id"
        attribute.value.string_value = "conv-7"
        assert _post(world, "member", request.SerializeToString()).status_code == 200
        ids.append(Run.objects.get(trace_id=_trace_id(request)).pk)
    found = world.client("viewer").get(f"{API}/runs/?conversation=conv-7").json()
    assert sorted(r["id"] for r in found["results"]) == sorted(ids)


def test_imported_runs_have_fork_points_and_diff_like_any_run(world: World) -> None:
    ids = []
    for reply in ("sunny", "rain"):
        request, _ = handmade(reply=reply)
        assert _post(world, "member", request.SerializeToString()).status_code == 200
        ids.append(Run.objects.get(trace_id=_trace_id(request)).pk)
    points = world.client("viewer").get(f"{API}/runs/{ids[0]}/fork-points/")
    assert points.status_code == 200
    assert [(p["node"], p["kind"], p["call"]) for p in points.json()] == [
        ("weather_agent", "before_call", "weather_agent#1/turn:1")]  # one call at a time
    diff = world.client("viewer").get(f"{API}/diff/?base={ids[0]}&variant={ids[1]}")
    assert diff.status_code == 200
    memory = diff.json()["memory"]["weather_agent"]
    assert (memory["op"], memory["base"], memory["variant"]) == ("changed", "sunny", "rain")


def test_traces_of_one_app_share_a_graph_and_its_version(
        world: World) -> None:
    runs = []
    for reply in ("a", "b"):
        request, _ = handmade(reply=reply)
        assert _post(world, "member", request.SerializeToString()).status_code == 200
        runs.append(Run.objects.get(trace_id=_trace_id(request)))
    assert {(r.graph_slug, r.graph_version_number) for r in runs} == {("otel-weather-agent", 1)}


def test_a_forks_export_carries_its_served_nodes_calls_from_the_recording(
        fresh_world: World) -> None:
    """``right`` is served whole from the base's recording (``node.reused``: answers, no
    requests); the fork's OTLP export still has its chat span, request included, labelled
    ``reused`` (read from the base's log)."""
    from tests.api.test_fork_lifecycle import SHORT, post, settled

    client = fresh_world.client("member")
    started = post(client, "/forks/", {"base_run": fresh_world.lab_diamond,
                                       "at": {"before_node": "left"}, "changes": [SHORT],
                                       "policy": {"memoize": True}})
    fork = settled(client, f"/forks/{started.json()['id']}/")
    assert fork["memo_hits"] == [{"node": "right", "occurrence": 1}]
    spans = client.get(f"{API}/runs/{fork['id']}/otlp/").json()[
        "resourceSpans"][0]["scopeSpans"][0]["spans"]
    by_id = {s["spanId"]: s for s in spans}

    def attrs(span: dict[str, Any]) -> dict[str, Any]:
        return {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}

    chats = [s for s in spans if s["name"].startswith("chat ")
             and by_id[s["parentSpanId"]]["name"] == "right"]
    (served,) = chats
    assert attrs(served)["forklab.call.label"] == "reused"
    assert attrs(served)["forklab.call.key"] == "right#1/turn:1"
    base_request = Event.objects.get(run_id=fresh_world.lab_diamond, node="right",
                                     type="agent.requested").payload
    sent = json.loads(attrs(served)["gen_ai.input.messages"])
    assert [p["content"] for m in sent for p in m["parts"]] == [
        m["content"] for m in base_request["messages"]]
