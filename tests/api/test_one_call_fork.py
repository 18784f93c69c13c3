"""``/forks/`` over runs imported from traces (SPEC §8 (a)): a one-call fork re-asks one
replayable call through forklab's providers — here the loopback vendor stub, in the
official client's format — and its diff and compare page show the old and the new reply;
what cannot be forked is refused with a code that says why."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from forklab.runs.models import Run
from forklab.runs.task_backends import drain
from tests.api.conftest import API, World
from tests.traces.spans import GENAI_CONTENT, GENAI_EVENTS, GENAI_NO_CONTENT, handmade, traced
from tests.vendor_stub import VendorStub
from tests.vendor_stub.fixtures import server, stub

__all__ = ["server", "stub"]  # the vendor stub fixtures, for this module

pytestmark = pytest.mark.django_db

KEY = "weather_agent#1/turn:1"
LYON = [{"role": "user", "content": "Weather in Lyon?"}]


def _import(world: World, request: Any) -> Run:
    response = world.client("member").post(
        "/v1/traces", data=request.SerializeToString(),
        content_type="application/x-protobuf", headers={"X-Forklab-Project": "lab"})
    assert response.status_code == 200
    trace_id = request.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    return Run.objects.get(trace_id=trace_id)


def _post(world: World, path: str, body: Any) -> Any:
    return world.client("member").post(f"{API}{path}", body, content_type="application/json")


@pytest.fixture
def settled(settings: Any, stub: VendorStub) -> VendorStub:
    """Traces count as settled at once, and forklab's openai provider is the stub."""
    settings.FORKLAB_TRACE_SETTLE_S = 0
    settings.FORKLAB_OPENAI_BASE_URL = stub.openai_base_url
    settings.FORKLAB_OPENAI_MAX_RETRIES = 0
    return stub


@pytest.mark.django_db(transaction=True)
def test_a_one_call_fork_re_asks_the_vendor_and_diffs_old_and_new_reply(
        fresh_world: World, settled: VendorStub) -> None:
    request, _ = traced(settled, "genai", GENAI_CONTENT, tools=False)
    run = _import(fresh_world, request)
    body = {"base_run": run.pk, "changes": [{"kind": "messages", "call": KEY,
                                             "messages": LYON}]}
    preflight = _post(fresh_world, "/forks/preflight/", body)
    assert preflight.status_code == 200, preflight.json()
    assert preflight.json()["estimate"]["live_calls"] == 1
    assert preflight.json()["point"]["call"] == KEY
    started = _post(fresh_world, "/forks/", body)
    assert started.status_code == 202, started.json()
    assert drain(timeout=60)
    fork = fresh_world.client("member").get(f"{API}/forks/{started.json()['id']}/").json()
    assert (fork["state"], fork["status"]) == ("complete", "completed")
    assert [(c["call"], c["label"]) for c in fork["calls"]] == [(KEY, "changed")]
    assert fork["diff"]["path"]["one_call"] == KEY
    sent = settled.bodies("openai")[-1]
    assert sent["messages"][-1] == LYON[0] and "max_tokens" not in sent

    client = Client()
    client.force_login(fresh_world.users["member"])
    page = client.get(f"/compare/{run.pk}/{fork['id']}/").content.decode()
    assert "You said: Weather in Paris?" in page and "You said: Weather in Lyon?" in page
    assert any("one-call fork" in w for w in fork["warnings"])
    shown = client.get(f"/runs/{fork['id']}/").content.decode()
    assert f'data-one-call="{KEY}"' in shown and "later calls were not re-executed" in shown


@pytest.mark.django_db(transaction=True)
def test_a_late_span_rewrites_the_run_and_its_forks_stay_its_forks(
        fresh_world: World, settings: Any) -> None:
    settings.FORKLAB_TRACE_SETTLE_S = 0
    early, late = handmade(late=True)
    run = _import(fresh_world, early)
    started = _post(fresh_world, "/forks/", {
        "base_run": run.pk, "changes": [{"kind": "model", "call": KEY, "model": "scripted-small",
                                         "provider": "scripted"}]})
    assert started.status_code == 202, started.json()
    assert drain(timeout=60)
    _import(fresh_world, late)  # the imported run's log is rewritten
    fork = Run.objects.get(pk=started.json()["id"])
    assert fork.parent_run_id == run.pk and fork.status == "completed", fork.error


def test_a_trace_still_arriving_is_refused_with_a_retry_hint(world: World) -> None:
    request, _ = handmade(reply="Hail.")
    run = _import(world, request)
    response = _post(world, "/forks/", {"base_run": run.pk, "at": {"before_call": KEY}})
    assert response.status_code == 409
    assert response.json()["code"] == "trace_arriving"
    assert 0 < response.json()["retry_after_s"] <= 5
    assert not Run.objects.filter(parent_run=run).exists()


def test_a_trace_whose_spans_wait_on_the_backlog_is_refused_until_mapped(
        world: World, settings: Any) -> None:
    """Under a burst the receiver stores spans and maps them later: until then the run does
    not show them, so a fork is refused as for a trace still arriving."""
    from forklab.runs.models.traces import TraceBacklog
    from forklab.runs.traces import map_backlog

    settings.FORKLAB_TRACE_SETTLE_S = 0
    early, _ = handmade(late=True)
    run = _import(world, early)
    TraceBacklog.objects.create(project=run.project, trace_id=run.trace_id,
                                since=timezone.now(), mark="pending")
    response = _post(world, "/forks/", {"base_run": run.pk, "at": {"before_call": KEY}})
    assert (response.status_code, response.json()["code"]) == (409, "trace_arriving")
    assert "not yet mapped" in response.json()["detail"]
    map_backlog.call(run.project_id)
    assert not TraceBacklog.objects.filter(trace_id=run.trace_id).exists()
    response = _post(world, "/forks/preflight/", {"base_run": run.pk, "changes": [
        {"kind": "model", "call": KEY, "model": "scripted-small", "provider": "scripted"}]})
    assert response.status_code == 200, response.json()


def test_an_inspect_only_call_is_refused_with_what_is_missing(
        world: World, settled: VendorStub) -> None:
    request, _ = traced(settled, "genai", GENAI_NO_CONTENT, tools=False)
    run = _import(world, request)
    for path in ("/forks/preflight/", "/forks/"):
        response = _post(world, path, {"base_run": run.pk, "at": {"before_call": KEY}})
        assert response.status_code == 422
        body = response.json()
        assert body["code"] == "call_not_replayable" and body["call"] == KEY
        assert "request messages" in body["missing"]
        assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in body["capture_hint"]
    assert not Run.objects.filter(parent_run=run).exists()


@pytest.mark.parametrize("body", [
    {"at": "before:weather_agent",
     "changes": [{"kind": "model", "target": "weather_agent", "model": "gpt-4o"}]},
    {"at": {"before_call": KEY}, "changes": [{"kind": "memory", "set": {"x": 1}}]},
])
def test_changes_an_imported_run_cannot_take_are_refused(
        world: World, settings: Any, body: dict[str, Any]) -> None:
    settings.FORKLAB_TRACE_SETTLE_S = 0
    request, _ = handmade(reply="Fog.")
    run = _import(world, request)
    response = _post(world, "/forks/", {"base_run": run.pk, **body})
    assert response.status_code == 422
    assert response.json()["code"] == "one_call_only"
    assert "before_call" in response.json()["detail"]


def test_replaying_an_imported_run_stays_refused_saying_what_is_possible(
        world: World) -> None:
    from forklab.runs.errors import ImportedRunNotForkable
    from forklab.runs.imported_forks import require_replayable

    request, _ = handmade(reply="Snow.")
    run = _import(world, request)
    with pytest.raises(ImportedRunNotForkable) as refused:
        require_replayable(run)
    assert "fork one of its replayable model calls" in refused.value.message


@pytest.mark.django_db(transaction=True)
def test_a_one_call_fork_is_not_replayed_either(
        fresh_world: World, settings: Any) -> None:
    from forklab.runs.errors import ImportedRunNotForkable
    from forklab.runs.imported_forks import require_replayable

    settings.FORKLAB_TRACE_SETTLE_S = 0
    run = _import(fresh_world, handmade()[0])
    started = _post(fresh_world, "/forks/", {
        "base_run": run.pk, "changes": [{"kind": "model", "call": KEY,
                                         "model": "scripted-small", "provider": "scripted"}]})
    assert started.status_code == 202 and drain(timeout=60)
    with pytest.raises(ImportedRunNotForkable) as refused:
        require_replayable(Run.objects.get(pk=started.json()["id"]))
    assert "one-call fork" in refused.value.message


def test_a_call_whose_content_arrives_later_as_log_records_becomes_forkable(
        world: World, settled: VendorStub) -> None:
    spans, logs = traced(settled, "genai", GENAI_EVENTS, tools=False)
    run = _import(world, spans)
    body = {"base_run": run.pk, "at": {"before_call": KEY}}
    assert _post(world, "/forks/preflight/", body).json()["code"] == "call_not_replayable"
    response = world.client("member").post(
        "/v1/logs", data=logs.SerializeToString(), content_type="application/x-protobuf",
        headers={"X-Forklab-Project": "lab"})
    assert response.status_code == 200
    preflight = _post(world, "/forks/preflight/", body)  # the rewritten run, reloaded
    assert preflight.status_code == 200, preflight.json()


@pytest.mark.django_db(transaction=True)
def test_a_sweep_asks_one_imported_call_of_each_model(
        fresh_world: World, settled: VendorStub) -> None:
    request, _ = traced(settled, "genai", GENAI_CONTENT, tools=False)
    run = _import(fresh_world, request)
    body = {"base_run": run.pk, "at": {"before_call": KEY}, "variants": {
        model: {"kind": "model", "call": KEY, "model": model}
        for model in ("gpt-4.1", "gpt-4o")}}
    estimate = _post(fresh_world, "/sweeps/estimate/", body)
    assert estimate.status_code == 200, estimate.json()
    started = _post(fresh_world, "/sweeps/", body)
    assert started.status_code == 202, started.json()
    assert drain(timeout=60)
    sweep = fresh_world.client("member").get(
        f"{API}/sweeps/{started.json()['fork_group_id']}/").json()
    assert {name: v["status"] for name, v in sweep["variants"].items()} == {
        "gpt-4.1": "completed", "gpt-4o": "completed"}
    assert sorted(b["model"] for b in settled.bodies("openai")[-2:]) == ["gpt-4.1", "gpt-4o"]
