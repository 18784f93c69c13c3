"""An imported trace forked by re-executing the code it came from (SPEC §8 (b)).

The demo support agent runs OUTSIDE forklab, as a team runs it: the official ``openai``
client against the vendor stub, traced by the real openinference-instrumentation-openai
with OpenInference's own ``tracer.agent`` span around it. Its spans are sent to
``POST /v1/traces``; ``FORKLAB_WORKFLOW_MAP`` maps the agent's name to the workflow, and a
fork of the imported run re-executes the function with the imported calls answering its
prefix. The stub counts what really reached it; the world counts real refunds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import override_settings

from forklab.demo_agents import support as demo
from forklab.engine.scenarios import tools as world_tools
from forklab.runs.models import Run
from forklab.runs.task_backends import drain
from tests.api.conftest import API, World, fresh_world
from tests.sdk.test_cli import cli
from tests.traces.spans import traced_workflow
from tests.vendor_stub import VendorStub

__all__ = ["fresh_world"]

pytestmark = pytest.mark.django_db(transaction=True)

TICKET = "Order A-1001 arrived damaged, please refund 39.98"
# forked right after the import: no wait for late spans (trace_arriving has its own tests)
MAPPED = override_settings(
    FORKLAB_WORKFLOW_MAP={"support": "forklab.demo_agents.support:support"},
    FORKLAB_TRACE_SETTLE_S=0)
# the model calls' messages hidden; the agent span's arguments (input.value) still recorded
HIDDEN_MESSAGES = {"OPENINFERENCE_HIDE_INPUT_MESSAGES": "true",
                   "OPENINFERENCE_HIDE_OUTPUT_MESSAGES": "true"}
KEYS = ["support#1/openai:1", "support#1/tool:lookup_order#1", "support#1/tool:issue_refund#1",
        "support#1/openai:2"]


def _imported(world: World, stub: VendorStub, **options: Any) -> str:
    """The demo agent traced outside forklab, imported; the imported run's id."""
    request = traced_workflow(stub, demo.support, {"ticket": TICKET}, name="support",
                              **options)
    response = world.client("member").post(
        "/v1/traces", data=request.SerializeToString(),
        content_type="application/x-protobuf", headers={"X-Forklab-Project": "lab"})
    assert response.status_code == 200
    stub.reset()
    return str(Run.objects.get(trace_id__gt="", label="support").pk)


def _fork(world: World, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = world.client("admin").post(f"{API}/forks/", body,
                                          content_type="application/json")
    if response.status_code >= 400:
        return response.status_code, response.json()
    assert drain(timeout=60)
    return response.status_code, world.client("admin").get(
        f"{API}/forks/{response.json()['id']}/").json()


def _labels(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["call"], c["label"]) for c in result["calls"] if c.get("call")]


@MAPPED
def test_a_mapped_imported_run_forks_at_a_call_with_the_trace_answering_the_prefix(
        fresh_world: World, clients: VendorStub) -> None:
    run_id = _imported(fresh_world, clients)
    points = fresh_world.client("viewer").get(f"{API}/runs/{run_id}/fork-points/").json()
    assert [p["call"] for p in points if p["kind"] == "before_call"] == KEYS[1:]
    refunds = world_tools.WORLD.count("refund")

    status, result = _fork(fresh_world, {
        "base_run": run_id, "at": {"before_call": "support#1/openai:2"},
        "changes": [{"kind": "model", "call": "support#1/openai:2", "model": "gpt-4.1"}]})
    assert status == 202 and result["status"] == "completed", result["error"]
    assert [b["model"] for b in clients.bodies("openai")] == ["gpt-4.1"]  # the tail only
    assert _labels(result) == [(KEYS[0], "reused"), (KEYS[1], "reused"), (KEYS[2], "reused"),
                               (KEYS[3], "changed")]
    assert world_tools.WORLD.count("refund") == refunds  # the refund was served, not made
    base = Run.objects.get(pk=result["base_run_id"])
    assert base.graph_slug == "support" and base.input["ticket"] == TICKET
    events = fresh_world.client("viewer").get(f"{API}/runs/{base.pk}/events/").json()
    imported = next(e for e in events["results"] if e["type"] == "trace.imported")
    assert [c["imported_call"] for c in imported["payload"]["calls"]] == [
        "support#1/turn:1", "support#1/turn:1/tool:1", "support#1/turn:1/tool:2",
        "support#1/turn:2"]


@MAPPED
def test_a_null_fork_of_a_mapped_imported_run_makes_no_request_and_reproduces_it(
        fresh_world: World, clients: VendorStub) -> None:
    run_id = _imported(fresh_world, clients)
    imported = Run.objects.get(pk=run_id)
    bases = set()
    for at in ({"before_call": "support#1/openai:2"}, "start"):
        _, result = _fork(fresh_world, {"base_run": run_id, "at": at,
                                        "policy": {"memoize": True}})
        assert result["status"] == "completed", result
        bases.add(result["base_run_id"])
        assert result["memory"]["output"] == imported.memory["support"]
        assert not result["diff"]["memory"], result["diff"]["memory"]
    assert len(bases) == 1  # one workflow base, written once
    # the map may name a workflow by the id it has in the project (its graph is there now)
    with override_settings(FORKLAB_WORKFLOW_MAP={"support": "support"}):
        _, result = _fork(fresh_world, {"base_run": run_id, "policy": {"memoize": True},
                                        "at": {"before_call": "support#1/openai:2"}})
    assert result["status"] == "completed", result
    assert clients.requests == []


@MAPPED
def test_a_refund_the_trace_never_made_is_blocked_by_the_guard(
        fresh_world: World, clients: VendorStub) -> None:
    run_id = _imported(fresh_world, clients)
    refunds = world_tools.WORLD.count("refund")
    reply = {"tool_calls": [{"id": "c1", "name": "issue_refund",
                             "arguments": {"order_id": "A-1001", "amount": 500}}]}
    _, result = _fork(fresh_world, {
        "base_run": run_id, "changes": [{"kind": "reply", "call": "support#1/openai:1",
                                         **reply}]})
    assert result["status"] == "blocked", result
    assert result["suppressed_effects"][0]["inputs"]["tool"] == "issue_refund"
    assert world_tools.WORLD.count("refund") == refunds
    assert clients.requests == []


@MAPPED
def test_code_that_changed_since_the_trace_diverges_naming_the_call_and_the_part(
        fresh_world: World, clients: VendorStub, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = _imported(fresh_world, clients)
    monkeypatch.setattr(demo, "SYSTEM", "You are a terse support agent.")
    _, result = _fork(fresh_world, {"base_run": run_id,
                                    "at": {"before_call": "support#1/openai:2"}})
    assert result["status"] == "failed"
    error = result["error"]
    assert error["type"] == "prefix_diverged"
    assert "support#1/openai:1" in error["message"] and "(system)" in error["message"]
    assert clients.requests == []


@MAPPED
def test_an_inspect_only_call_before_the_point_is_refused_naming_it(
        fresh_world: World, clients: VendorStub) -> None:
    run_id = _imported(fresh_world, clients, env=HIDDEN_MESSAGES)
    status, body = _fork(fresh_world, {"base_run": run_id,
                                       "at": {"before_call": "support#1/openai:2"}})
    assert (status, body.get("code"), body.get("call")) == (
        422, "call_not_replayable", "support#1/openai:1"), body
    assert "OPENINFERENCE_HIDE_INPUTS" in body["detail"]


def test_a_map_naming_no_runnable_workflow_is_a_configuration_error(
        fresh_world: World, clients: VendorStub) -> None:
    run_id = _imported(fresh_world, clients)
    for target in ("nope", "os:system"):
        with override_settings(FORKLAB_WORKFLOW_MAP={"support": target},
                               FORKLAB_TRACE_SETTLE_S=0):
            status, body = _fork(fresh_world, {"base_run": run_id})
        assert (status, body["code"]) == (422, "workflow_map_invalid"), body
        assert "FORKLAB_WORKFLOW_MAP" in body["detail"]
    with override_settings(FORKLAB_TRACE_SETTLE_S=0):  # not mapped: one call at a time
        status, body = _fork(fresh_world, {"base_run": run_id})
    assert (status, body["code"]) == (422, "one_call_only")


@MAPPED
def test_a_trace_without_the_workflows_arguments_needs_them_in_the_request(
        fresh_world: World, clients: VendorStub) -> None:
    run_id = _imported(fresh_world, clients, agent_span=False)
    status, body = _fork(fresh_world, {"base_run": run_id, "policy": {"memoize": True}})
    assert (status, body["code"]) == (422, "workflow_input_missing")
    assert "input_patch" in body["detail"] and "ticket" in body["detail"]
    status, result = _fork(fresh_world, {
        "base_run": run_id, "at": "start", "policy": {"memoize": True},
        "changes": [{"kind": "input_patch", "patch": {"ticket": TICKET}}]})
    assert result.get("status") == "completed", result
    assert clients.requests == []  # the trace's calls match what the code makes


@MAPPED
def test_the_cli_lists_and_forks_a_mapped_imported_run(
        fresh_world: World, clients: VendorStub, capsys: pytest.CaptureFixture[str]) -> None:
    run_id = _imported(fresh_world, clients)
    code, out, err = cli(capsys, "forkpoints", run_id, "--json")
    assert code == 0, err
    assert [p["call"] for p in json.loads(out) if p["kind"] == "before_call"] == KEYS[1:]
    code, out, err = cli(capsys, "fork", run_id, "--at", "before:support#1/openai:2",
                         "--memoize", "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "completed" and clients.requests == []
    code, out, err = cli(capsys, "forkcheck", run_id)
    assert code == 0, err + out
    code, _, err = cli(capsys, "replay", run_id)
    assert code == 1 and err.startswith("error: imported_run:")


@MAPPED
def test_preflight_and_sweeps_of_a_mapped_imported_run_fork_its_workflow_base(
        fresh_world: World, clients: VendorStub) -> None:
    run_id = _imported(fresh_world, clients)
    client = fresh_world.client("admin")
    at = {"before_call": "support#1/openai:2"}
    preflight = client.post(f"{API}/forks/preflight/", {"base_run": run_id, "at": at},
                            content_type="application/json")
    assert preflight.status_code == 200, preflight.json()
    assert preflight.json()["estimate"]["live_calls"] >= 1  # the workflow's model calls
    variants = {"terse": [{"kind": "prompt", "call": "support#1/openai:2",
                           "system_prompt": "Be terse."}],
                "same": []}
    estimate = client.post(f"{API}/sweeps/estimate/", {"base_run": run_id, "at": at,
                                                        "variants": variants},
                           content_type="application/json")
    assert estimate.status_code == 200, estimate.json()
    started = client.post(f"{API}/sweeps/", {"base_run": run_id, "at": at,
                                             "variants": variants,
                                             "policy": {"memoize": True}},
                          content_type="application/json")
    assert started.status_code == 202, started.json()
    assert drain(timeout=60)
    sweep = client.get(f"{API}/sweeps/{started.json()['fork_group_id']}/").json()
    assert {n: v["status"] for n, v in sweep["variants"].items()} == {
        "terse": "completed", "same": "completed"}
    assert len(clients.requests) == 1  # only the changed call went out
