"""``/graphs/``: list, read with versions, register (new version when changed)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from forklab.engine.scenarios import SCENARIOS
from forklab.runs.models import Graph, GraphVersion
from tests.api.conftest import API, World

pytestmark = pytest.mark.django_db


def diamond_spec() -> dict[str, Any]:
    return SCENARIOS["diamond"].graph().to_wire()


def register(world: World, who: str, body: Any) -> Any:
    return world.client(who).post(f"{API}/graphs/", body, content_type="application/json")


def test_graphs_lists_the_graphs_of_your_projects(world: World) -> None:
    response = world.client("viewer").get(f"{API}/graphs/")
    assert response.status_code == 200
    body = response.json()
    assert [(g["project"], g["graph_id"], g["latest_version"]) for g in body["results"]] == [
        ("lab", "diamond", 1), ("lab", "order-fulfilment", 1)]
    assert set(body["results"][0]) == {"id", "project", "graph_id", "name", "latest_version",
                                       "created_at"}


def test_graphs_filter_by_project_and_graph_id(world: World) -> None:
    body = world.client("demo").get(f"{API}/graphs/", {"graph_id": "panel-vote"}).json()
    assert [(g["project"], g["graph_id"]) for g in body["results"]] == [("demo", "panel-vote")]
    assert world.client("demo").get(f"{API}/graphs/", {"project": "lab"}).json()["count"] == 0


def test_a_graph_reads_back_with_its_versions_by_id_or_graph_id(world: World) -> None:
    graph = Graph.objects.get(project=world.lab, graph_id="diamond")
    by_id = world.client("viewer").get(f"{API}/graphs/{graph.pk}/")
    by_slug = world.client("viewer").get(f"{API}/graphs/diamond/")
    assert by_id.status_code == by_slug.status_code == 200
    assert by_id.json() == by_slug.json()
    body = by_id.json()
    assert (body["id"], body["graph_id"], body["latest_version"]) == (graph.pk, "diamond", 1)
    assert [v["version"] for v in body["versions"]] == [1]
    assert body["versions"][0]["spec"]["id"] == "diamond"
    assert body["versions"][0]["spec_hash"] == GraphVersion.objects.get(graph=graph).spec_hash


def test_a_graph_id_in_two_of_your_projects_needs_the_project(world: World) -> None:
    from forklab.runs.models import Membership, Role

    Membership.objects.create(user=world.users["viewer"], project=world.demo, role=Role.VIEWER)
    response = world.client("viewer").get(f"{API}/graphs/diamond/")
    assert response.status_code == 400
    assert response.json() == {
        "code": "invalid_argument", "graph": "diamond",
        "detail": "graph 'diamond' exists in several of your projects; add ?project="}
    response = world.client("viewer").get(f"{API}/graphs/diamond/", {"project": "demo"})
    assert response.status_code == 200 and response.json()["project"] == "demo"


def test_a_graph_outside_your_projects_is_not_found(world: World) -> None:
    other = Graph.objects.get(project=world.demo, graph_id="panel-vote")
    for key in (str(other.pk), "panel-vote"):
        response = world.client("viewer").get(f"{API}/graphs/{key}/")
        assert response.status_code == 404
        assert response.json() == {"code": "not_found", "graph": key,
                                   "detail": f"no graph {key!r} among your projects"}


def test_registering_a_new_graph_stores_version_1(world: World) -> None:
    spec = {**diamond_spec(), "id": "diamond-copy", "name": "A copy"}
    response = register(world, "admin", {"spec": spec})
    assert response.status_code == 201
    body = response.json()
    assert (body["project"], body["graph_id"], body["name"], body["registered_version"],
            body["created"], body["latest_version"]) == (
        "lab", "diamond-copy", "A copy", 1, True, 1)
    assert [v["version"] for v in body["versions"]] == [1]


def test_registering_the_same_spec_again_changes_nothing(world: World) -> None:
    response = register(world, "admin", {"project": "lab", "spec": diamond_spec()})
    assert response.status_code == 200
    assert (response.json()["registered_version"], response.json()["created"]) == (1, False)
    assert GraphVersion.objects.filter(graph__project=world.lab,
                                       graph__graph_id="diamond").count() == 1


def test_registering_a_changed_spec_adds_a_version(world: World) -> None:
    spec = diamond_spec()
    spec["agents"]["planner"]["system_prompt"] = "Plan in three steps."
    response = register(world, "admin", {"project": "lab", "spec": spec})
    assert response.status_code == 201
    body = response.json()
    assert (body["registered_version"], body["latest_version"]) == (2, 2)
    assert [v["version"] for v in body["versions"]] == [1, 2]
    assert (body["versions"][1]["spec"]["agents"]["planner"]["system_prompt"]
            == "Plan in three steps.")


def test_an_invalid_graph_names_the_node_and_field(world: World) -> None:
    spec = copy.deepcopy(diamond_spec())
    spec["nodes"][1]["kind"] = "teleport"
    response = register(world, "admin", {"project": "lab", "spec": spec})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_graph"
    assert "left" in body["detail"] and "kind" in body["detail"]
    assert body["errors"]


@pytest.mark.parametrize(("tool", "says"), [
    ("os.system", "outside the allowed modules"),
    ("forklab.engine.scenarios.tools.no_such_tool", "cannot import"),
])
def test_a_tool_this_deployment_cannot_run_is_refused_at_registration(
        world: World, tool: str, says: str) -> None:
    spec = {**SCENARIOS["order-fulfilment"].graph().to_wire(), "id": "risky"}
    charge = next(n for n in spec["nodes"] if n["id"] == "charge")
    charge["tool"] = tool
    response = register(world, "admin", {"project": "lab", "spec": spec})
    assert response.status_code == 422, response.content
    body = response.json()
    assert body["code"] == "unknown_tool" and tool in body["detail"] and says in body["detail"]
    assert not Graph.objects.filter(graph_id="risky").exists()


def test_a_graph_edge_to_an_unknown_node_is_refused(world: World) -> None:
    spec = diamond_spec()
    spec["edges"].append({"from": "join", "to": "nowhere"})
    response = register(world, "admin", {"project": "lab", "spec": spec})
    assert response.status_code == 400
    assert response.json()["code"] in ("invalid_graph", "unknown_node")
    assert "nowhere" in response.json()["detail"]


def test_members_cannot_register_graphs(world: World) -> None:
    response = register(world, "member", {"project": "lab", "spec": diamond_spec()})
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert response.json()["required"] == "admin"


def test_an_admin_of_several_projects_must_name_one(world: World) -> None:
    response = register(world, "demo", {"spec": diamond_spec()})
    assert response.status_code == 400
    assert response.json() == {
        "code": "invalid_request", "field": "project",
        "detail": "field 'project': name the project (registering a graph needs the admin "
                  "role; yours: default, demo)"}


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"project": "nowhere", "spec": {"id": "x"}}, 404, "not_found"),
    ({"project": "demo", "spec": {"id": "x"}}, 404, "not_found"),
    ({"project": "lab"}, 400, "invalid_request"),
    ({"project": "lab", "spec": "graph"}, 400, "invalid_request"),
    ({"project": "lab", "spec": {}}, 400, "invalid_graph"),
    ([], 400, "invalid_request"),
])
def test_bad_graph_registrations(world: World, body: Any, status: int, code: str) -> None:
    response = register(world, "admin", body)
    assert response.status_code == status, response.json()
    assert response.json()["code"] == code


@pytest.mark.parametrize("key", ["²", "100000000000000000000", "0"])
def test_odd_graph_keys_are_not_found(world: World, key: str) -> None:
    response = world.client("viewer").get(f"{API}/graphs/{key}/")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
