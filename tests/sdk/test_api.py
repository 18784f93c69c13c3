"""A workflow run through the REST API: ``POST /runs/`` with ``workflow``, the allow-list,
roles, background recording and a per-call fork by ``POST /forks/`` (SPEC §7)."""

from __future__ import annotations

from typing import Any

import pytest

from forklab.runs.task_backends import drain
from tests.api.conftest import API, World, fresh_world, world
from tests.vendor_stub import VendorStub

__all__ = ["fresh_world", "world"]

pytestmark = pytest.mark.django_db

SUPPORT = "forklab.demo_agents.support:support"
TICKET = {"ticket": "Order A-1001 arrived damaged, please refund 39.98"}


def test_posting_a_workflow_run_queues_it_under_the_workflows_graph(world: World) -> None:
    response = world.client("member").post(
        f"{API}/runs/", {"workflow": SUPPORT, "input": {"ticket": "hi"}, "project": "lab"},
        content_type="application/json")
    assert response.status_code == 202, response.json()
    run = response.json()
    assert (run["status"], run["graph"], run["graph_version"]) == ("queued", "support", 1)


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"workflow": "os:system", "project": "lab"}, 422, "unknown_workflow"),
    ({"workflow": "forklab.demo_agents.support:nope", "project": "lab"}, 422,
     "unknown_workflow"),
    ({"workflow": SUPPORT, "graph": "diamond"}, 400, "invalid_request"),
    ({"workflow": SUPPORT, "graph_version": 1}, 400, "invalid_request"),
])
def test_bad_workflow_run_requests(world: World, body: dict[str, Any], status: int,
                                   code: str) -> None:
    response = world.client("member").post(f"{API}/runs/", body,
                                           content_type="application/json")
    assert response.status_code == status, response.json()
    assert response.json()["code"] == code


def test_viewers_cannot_record_workflow_runs(world: World) -> None:
    response = world.client("viewer").post(f"{API}/runs/", {"workflow": SUPPORT,
                                                            "project": "lab"},
                                           content_type="application/json")
    assert response.status_code == 403


@pytest.mark.django_db(transaction=True)
def test_a_posted_workflow_run_is_recorded_in_the_background_and_forked_by_the_api(
        fresh_world: World, clients: VendorStub) -> None:
    client = fresh_world.client("admin")
    run = client.post(f"{API}/runs/", {"workflow": SUPPORT, "project": "lab",
                                       "input": TICKET},
                      content_type="application/json").json()
    assert drain(timeout=60)
    done = client.get(f"{API}/runs/{run['id']}/").json()
    assert done["status"] == "completed", done["error"]
    assert done["memory"]["output"].startswith("Results: ")
    clients.reset()
    forked = client.post(f"{API}/forks/", {
        "base_run": run["id"], "policy": {"memoize": True},
        "changes": [{"kind": "tool_result", "call": "support/tool:lookup_order#1",
                   "result": {"found": False}}]}, content_type="application/json")
    assert forked.status_code in (201, 202), forked.json()
    assert drain(timeout=60)
    result = client.get(f"{API}/runs/{forked.json()['id']}/").json()
    assert result["status"] == "completed", result["error"]
    assert "found" in result["memory"]["output"]
    assert len(clients.requests) == 1  # only the call whose request the change altered


def test_a_failed_workflow_runs_page_shows_the_codes_traceback(
        world: World, settings: Any) -> None:
    from forklab.runs.services import record_run, resolve_workflow

    settings.FORKLAB_WORKFLOW_MODULES = ["tests.sdk"]
    graph = resolve_workflow("tests.sdk.agents:crash").graph
    run = record_run(project=world.lab, graph=graph, input={"question": "why"})
    assert run.status == "failed"
    client = world.client(None)
    client.force_login(world.users["viewer"])
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert "raised ZeroDivisionError: division by zero" in page
    assert "tests/sdk/agents.py" in page and "workflow_node.py" not in page


def test_a_workflow_runs_step_shows_each_model_and_tool_call_in_order(
        world: World, clients: VendorStub) -> None:
    from forklab.runs.services import record_run, resolve_workflow

    run = record_run(project=world.lab, graph=resolve_workflow(SUPPORT).graph, input=TICKET)
    assert run.status == "completed"
    client = world.client(None)
    client.force_login(world.users["viewer"])
    step = client.get(f"/runs/{run.id}/steps/support/1/").content.decode()
    model, lookup, refund = (step.index("support → gpt-4.1-mini"),
                             step.index("lookup_order (read)"), step.index("issue_refund (write)"))
    assert model < lookup < refund < step.index("support → gpt-4.1-mini", refund)
    assert "You are the support agent of an online shop." in step  # what was sent


def test_a_workflow_execution_reads_as_a_conversation_of_keyed_calls(
        world: World, clients: VendorStub) -> None:
    from forklab.runs.services import record_run, resolve_workflow

    run = record_run(project=world.lab, graph=resolve_workflow(SUPPORT).graph, input=TICKET)
    response = world.client("viewer").get(
        f"{API}/runs/{run.id}/conversation/", {"node": "support", "occurrence": 1})
    assert response.status_code == 200, response.json()
    thread = response.json()
    # each tool call the code made sits under the turn whose reply asked for it
    assert [(t["key"], [u["key"] for u in t["tools"]]) for t in thread["turns"]] == [
        ("support#1/openai:1", ["support#1/tool:lookup_order#1",
                                "support#1/tool:issue_refund#1"]),
        ("support#1/openai:2", [])]
    first = thread["turns"][0]
    assert [c["name"] for c in first["tool_calls"]] == ["lookup_order", "issue_refund"]
    assert [u["effect"] for u in first["tools"]] == ["read", "write"]
    assert thread["system_prompt"].startswith("You are the support agent")
