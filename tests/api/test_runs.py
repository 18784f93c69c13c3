"""``/runs/``: listing, reading, events, fork points, forks; recording in the background."""

from __future__ import annotations

import pytest

from forklab.engine.scenarios import SCENARIOS
from forklab.runs.models import Event, Run
from forklab.runs.task_backends import drain
from tests.api.conftest import API, World

pytestmark = pytest.mark.django_db

RUN_KEYS = {"id", "project", "graph", "graph_version", "run_kind", "status", "label",
            "parent_run_id", "fork_sequence_id", "fork_node_id", "fork_mutations",
            "fork_group_id", "replay_version", "input", "memory", "path", "cost", "created_at",
            "finished_at", "error", "imported"}


def test_runs_lists_only_the_runs_of_your_projects_newest_first(world: World) -> None:
    response = world.client("viewer").get(f"{API}/runs/")
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 2 and body["next"] is None and body["previous"] is None
    assert [r["id"] for r in body["results"]] == [world.lab_paused, world.lab_diamond]
    assert all(r["project"] == "lab" for r in body["results"])


def test_a_run_has_the_run_shape(world: World) -> None:
    response = world.client("viewer").get(f"{API}/runs/{world.lab_diamond}/")
    assert response.status_code == 200
    run = response.json()
    assert set(run) == RUN_KEYS
    assert run["id"] == world.lab_diamond
    assert (run["graph"], run["graph_version"], run["run_kind"], run["status"]) == (
        "diamond", 1, "primary", "completed")
    assert [step["node"] for step in run["path"]] == ["plan", "left", "right", "join"]
    assert set(run["path"][0]) == {"node", "occurrence", "iteration", "status"}
    assert set(run["cost"]) == {"input_tokens", "output_tokens", "usd"}
    assert run["cost"]["usd"] > 0 and run["finished_at"] and run["error"] is None


def test_runs_filter_by_kind_status_graph_and_parent(world: World) -> None:
    client = world.client("demo")

    def ids(query: str) -> list[str]:
        response = client.get(f"{API}/runs/?{query}")
        assert response.status_code == 200, response.json()
        return [r["id"] for r in response.json()["results"]]

    assert ids("graph=diamond") == [world.demo_runs["diamond"]]
    assert ids("status=failed") == [world.demo_runs["flaky-tool"]]
    assert len(ids("kind=primary")) == len(SCENARIOS)
    assert ids("kind=counterfactual") == []
    assert ids(f"parent={world.demo_runs['diamond']}") == []


def test_runs_paginate(world: World) -> None:
    body = world.client("demo").get(f"{API}/runs/?page_size=3&page=2").json()
    assert body["count"] == len(SCENARIOS) and len(body["results"]) == 3
    assert body["next"].endswith("page=3&page_size=3")
    assert body["previous"].endswith("page_size=3")


def test_a_page_past_the_end_is_not_found(world: World) -> None:
    response = world.client("demo").get(f"{API}/runs/?page=9")
    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "detail": "Invalid page."}


def test_an_unknown_filter_value_is_an_invalid_request(world: World) -> None:
    response = world.client("demo").get(f"{API}/runs/?status=done")
    assert response.status_code == 400
    assert response.json() == {
        "code": "invalid_request", "detail": "field 'status': \"done\" is not a valid choice.",
        "field": "status", "errors": [{"field": "status", "msg": '"done" is not a valid choice.'}]}


def test_a_run_in_another_project_does_not_exist_for_you(world: World) -> None:
    demo_run = world.demo_runs["diamond"]
    for path in ("", "events/", "fork-points/", "forks/"):
        response = world.client("admin").get(f"{API}/runs/{demo_run}/{path}")
        assert response.status_code == 404, path
        assert response.json() == {"code": "not_found", "detail": f"no run {demo_run!r}",
                                   "run_id": demo_run}


def test_events_come_in_seq_order_with_the_event_shape(world: World) -> None:
    response = world.client("viewer").get(f"{API}/runs/{world.lab_diamond}/events/")
    assert response.status_code == 200
    body = response.json()
    seqs = [e["seq"] for e in body["results"]]
    last = Run.objects.get(pk=world.lab_diamond).last_seq
    assert seqs == list(range(1, last + 1))
    assert body["last_seq"] == last and body["next"] is None and body["next_after"] is None
    first = body["results"][0]
    assert set(first) == {"seq", "type", "node", "occurrence", "iteration", "payload", "at"}
    assert first["type"] == "run.started" and first["payload"]["graph_id"] == "diamond"


def test_events_page_with_after_and_limit(world: World) -> None:
    client = world.client("viewer")
    url = f"{API}/runs/{world.lab_diamond}/events/"
    first = client.get(url, {"limit": 5}).json()
    assert [e["seq"] for e in first["results"]] == [1, 2, 3, 4, 5]
    assert first["next_after"] == 5
    assert first["next"] == f"http://testserver{url}?after=5&limit=5"
    second = client.get(first["next"]).json()
    assert [e["seq"] for e in second["results"]] == [6, 7, 8, 9, 10]


def test_events_filter_by_type(world: World) -> None:
    body = world.client("viewer").get(f"{API}/runs/{world.lab_diamond}/events/",
                                      {"type": "node.started", "after": 2}).json()
    assert [(e["type"], e["node"]) for e in body["results"]] == [
        ("node.started", "left"), ("node.started", "right"), ("node.started", "join")]
    expected = Event.objects.filter(run_id=world.lab_diamond, type="node.started", seq__gt=2)
    assert [e["seq"] for e in body["results"]] == [e.seq for e in expected.order_by("seq")]


def test_a_blank_event_paging_parameter_means_not_given(world: World) -> None:
    client = world.client("viewer")
    url = f"{API}/runs/{world.lab_diamond}/events/"
    blank = client.get(f"{url}?after=&limit=&type=")
    assert blank.status_code == 200
    assert blank.json() == client.get(url).json()


@pytest.mark.parametrize("query", ["after=-1", "after=x", "limit=0", "limit=5001"])
def test_bad_event_paging_is_an_invalid_request(world: World, query: str) -> None:
    response = world.client("viewer").get(f"{API}/runs/{world.lab_diamond}/events/?{query}")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert response.json()["field"] == query.split("=")[0]


def test_fork_points_list_every_boundary(world: World) -> None:
    response = world.client("viewer").get(f"{API}/runs/{world.lab_diamond}/fork-points/")
    assert response.status_code == 200
    points = response.json()
    assert [(p["node"], p["kind"]) for p in points] == [
        ("plan", "before_node"), ("left", "before_node"), ("right", "before_node"),
        ("join", "before_node"), (None, "end")]
    assert points[1] == {"seq": 6, "node": "left", "occurrence": 1, "iteration": 1,
                         "kind": "before_node", "label": "before 'left' execution 1, iteration 1",
                         "run_id": world.lab_diamond, "call": None}


def test_forks_of_a_run_lists_its_counterfactual_children(world: World) -> None:
    client = world.client("member")
    assert client.get(f"{API}/runs/{world.lab_diamond}/forks/").json()["count"] == 0
    started = client.post(f"{API}/forks/", {"base_run": world.lab_diamond, "at": "start"},
                          content_type="application/json").json()
    body = client.get(f"{API}/runs/{world.lab_diamond}/forks/").json()
    assert [r["id"] for r in body["results"]] == [started["id"]]
    assert body["results"][0]["run_kind"] == "counterfactual"


def test_posting_a_run_queues_it_for_the_background(world: World) -> None:
    response = world.client("member").post(
        f"{API}/runs/", {"graph": "diamond", "input": {"task": "Pick a database"},
                         "label": "api"}, content_type="application/json")
    assert response.status_code == 202
    run = response.json()
    assert set(run) == RUN_KEYS
    assert (run["status"], run["graph"], run["graph_version"], run["label"], run["project"],
            run["run_kind"], run["input"]) == (
        "queued", "diamond", 1, "api", "lab", "primary", {"task": "Pick a database"})


def test_viewers_cannot_record_runs(world: World) -> None:
    response = world.client("viewer").post(f"{API}/runs/", {"graph": "diamond"},
                                           content_type="application/json")
    assert response.status_code == 403
    assert response.json() == {
        "code": "permission_denied",
        "detail": "recording a run needs the member role in project 'lab'; you are viewer. "
                  "Ask a project admin.", "required": "member", "role": "viewer"}


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"graph": "nope"}, 404, "not_found"),
    ({"graph": "diamond", "graph_version": 7}, 404, "not_found"),
    ({"graph": "diamond", "project": "demo"}, 404, "not_found"),
    ({"graph": "diamond", "input": []}, 400, "invalid_request"),
    ({"input": {}}, 400, "invalid_request"),
    ({"graph": "diamond", "colour": "red"}, 400, "invalid_request"),
])
def test_bad_run_requests(world: World, body: dict[str, object], status: int, code: str) -> None:
    response = world.client("member").post(f"{API}/runs/", body, content_type="application/json")
    assert response.status_code == status, response.json()
    assert response.json()["code"] == code


def test_a_graph_in_several_of_your_projects_needs_the_project(world: World) -> None:
    from forklab.runs.models import Membership, Role

    Membership.objects.create(user=world.users["member"], project=world.demo, role=Role.MEMBER)
    response = world.client("member").post(f"{API}/runs/", {"graph": "diamond"},
                                           content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {
        "code": "invalid_request", "field": "project",
        "detail": "field 'project': graph 'diamond' exists in several of your projects "
                  "(demo, lab); name one"}
    response = world.client("member").post(f"{API}/runs/", {"graph": "diamond",
                                                            "project": "demo"},
                                           content_type="application/json")
    assert response.status_code == 202 and response.json()["project"] == "demo"


@pytest.mark.django_db(transaction=True)
def test_a_posted_run_is_recorded_in_the_background(fresh_world: World) -> None:
    client = fresh_world.client("member")
    run = client.post(f"{API}/runs/", {"graph": "diamond", "input": {"task": "Pick a db"}},
                      content_type="application/json").json()
    assert drain(timeout=60)
    done = client.get(f"{API}/runs/{run['id']}/").json()
    assert done["status"] == "completed"
    assert [s["node"] for s in done["path"]] == ["plan", "left", "right", "join"]
    assert done["memory"]["task"] == "Pick a db"
    events = client.get(f"{API}/runs/{run['id']}/events/").json()
    assert events["results"][0]["type"] == "run.started"
    assert events["results"][-1]["type"] == "run.completed"
