"""Hostile input at the API edge: each bad input is a clear 4xx, and nothing is stored.

One test per input the reliability issue names (lone surrogates, NUL, NaN/Infinity, JSON
nested thousands deep, run inputs nested past the limit, huge page numbers, big graphs), plus
the races and gaps: two answers, a reused idempotency key, an unseen base run, recording a
graph with live write tools. Every error body has the ``{code, detail}`` shape.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote_to_bytes

import pytest

from forklab.engine.inputs import MAX_DEPTH, MAX_GRAPH_NODES
from forklab.runs.models import Graph, Run
from tests.api.conftest import API, World

pytestmark = pytest.mark.django_db

PROMPT = {"kind": "prompt", "target": "left", "system_prompt": "Answer in one sentence."}


def raw_post(world: World, who: str, path: str, text: str) -> Any:
    return world.client(who).post(f"{API}{path}", text, content_type="application/json")


def fork_text(world: World, changes: str) -> str:
    return f'{{"base_run": "{world.lab_diamond}", "at": {{"before_node": "left"}}, ' \
        f'"changes": {changes}}}'


def nested_json(depth: int) -> str:
    return '{"k": ' * depth + '"leaf"' + "}" * depth


def assert_refused(response: Any, status: int, code: str, says: str = "") -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code and says in body["detail"], body
    return body


@pytest.mark.parametrize("changes, says", [
    ('[{"kind": "memory", "set": {"notes": "x\\ud800y"}}]',
     "body.changes[0].set.notes: the string"),
    ('[{"kind": "memory", "set": {"notes": "nul\\u0000"}}]',
     "body.changes[0].set.notes: the string holds a NUL character"),
    ('[{"kind": "memory", "set": {"notes": NaN}}]', "NaN is not valid JSON"),
    ('[{"kind": "memory", "set": {"notes": -Infinity}}]', "-Infinity is not valid JSON"),
])
def test_a_fork_body_holding_what_no_store_can_keep_is_invalid_input(
        world: World, changes: str, says: str) -> None:
    before = Run.objects.count()
    for path in ("/forks/", "/forks/preflight/"):
        assert_refused(raw_post(world, "member", path, fork_text(world, changes)), 400,
                       "invalid_input", says)
    assert Run.objects.count() == before


def test_json_nested_thousands_deep_is_refused_before_it_is_parsed(world: World) -> None:
    before = Run.objects.count()
    for depth in (5_000, 100_000):
        body = assert_refused(raw_post(world, "member", "/forks/", nested_json(depth)), 400,
                              "invalid_input", f"nested deeper than {MAX_DEPTH} levels")
        assert body["path"] == "body"
    assert Run.objects.count() == before


def test_django_reads_bodies_under_the_apis_own_limit() -> None:
    from django.conf import settings

    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == settings.FORKLAB_MAX_BODY_BYTES


@pytest.mark.parametrize("content_type", ["application/json",
                                          "application/x-www-form-urlencoded"])
def test_a_body_over_the_limit_is_invalid_input_whichever_layer_reads_it(
        world: World, content_type: str) -> None:
    from django.test import override_settings

    text = fork_text(world, "[]")[:-1] + f', "label": "{"x" * 5000}"}}'
    if content_type != "application/json":
        text = "label=" + "x" * 5000
    with override_settings(FORKLAB_MAX_BODY_BYTES=4096, DATA_UPLOAD_MAX_MEMORY_SIZE=4096):
        response = world.client("member").post(f"{API}/forks/", text, content_type=content_type)
    body = assert_refused(response, 400, "invalid_input",
                          "over the limit of 4096 bytes; send less")
    assert body["path"] == "body"


def test_a_run_input_nested_past_the_limit_is_refused_and_nothing_is_queued(
        world: World) -> None:
    before = Run.objects.count()
    for depth in (MAX_DEPTH + 1, 950, 1_000):
        text = f'{{"graph": "diamond", "project": "lab", "input": {nested_json(depth)}}}'
        assert_refused(raw_post(world, "admin", "/runs/", text), 400, "invalid_input",
                       "nested deeper")
    assert Run.objects.count() == before


@pytest.mark.parametrize("value, says", [
    ('"\\udfff"', "body.input.goal: the string"),
    ('"a\\u0000b"', "NUL character"),
    ("NaN", "NaN is not valid JSON"),
    ("Infinity", "Infinity is not valid JSON"),
    ("1e999", "inf is not a finite number"),
    ("123456789012345678901234567890", "does not fit in 64 bits"),
])
def test_a_run_input_that_cannot_be_stored_is_refused(world: World, value: str,
                                                      says: str) -> None:
    before = Run.objects.count()
    text = f'{{"graph": "diamond", "project": "lab", "input": {{"goal": {value}}}}}'
    assert_refused(raw_post(world, "admin", "/runs/", text), 400, "invalid_input", says)
    assert Run.objects.count() == before


def test_an_answer_holding_a_nul_is_invalid_input(world: World) -> None:
    text = '{"decision": "edited", "memory_updates": {"note": "\\u0000"}}'
    response = raw_post(world, "admin", f"/forks/{world.lab_paused}/answer/", text)
    # lab_paused is a primary run: not a fork (404) is checked before the body
    assert response.status_code in (400, 404)


@pytest.mark.parametrize("query", ["page=100000000000000000000", "page=-1", "page=abc",
                                   "page=%EF%BC%91"])
def test_a_huge_or_malformed_page_number_is_a_400_never_a_500(world: World, query: str) -> None:
    response = world.client("demo").get(f"{API}/runs/?{query}")
    assert_refused(response, 400, "invalid_request", "field 'page'")


@pytest.mark.parametrize("query", ["page_size=abc", "page_size=-1", "page_size=0",
                                   "page_size=501", "page_size=100000000000000000000",
                                   "page_size=%EF%BC%91", "page_size=2.5"])
def test_a_malformed_or_huge_page_size_is_a_400_naming_its_range(world: World,
                                                                query: str) -> None:
    response = world.client("demo").get(f"{API}/runs/?{query}")
    body = assert_refused(response, 400, "invalid_request",
                          "field 'page_size': expected an integer from 1 to 500")
    assert (body["field"], body["min"], body["max"]) == ("page_size", 1, 500)


def test_an_empty_page_size_means_the_default(world: World) -> None:
    response = world.client("demo").get(f"{API}/runs/?page_size=")
    assert response.status_code == 200


@pytest.mark.parametrize("query", ["after=100000000000000000000", "limit=100000000000000000000",
                                   "after=-5"])
def test_huge_event_query_integers_are_a_400(world: World, query: str) -> None:
    response = world.client("admin").get(f"{API}/runs/{world.lab_diamond}/events/?{query}")
    assert_refused(response, 400, "invalid_request")


@pytest.mark.parametrize("path", ["/runs/%00/", "/runs/?graph=%00", "/runs/?label%00=1",
                                  "/forks/ab%00cd/"])
def test_a_nul_in_the_url_is_invalid_input(world: World, path: str) -> None:
    assert_refused(world.client("admin").get(f"{API}{path}"), 400, "invalid_input", "NUL")


def wsgi_get(path: str) -> Any:
    """GET ``path`` as gunicorn passes it: PATH_INFO the percent-decoded bytes as latin-1,
    RAW_URI as sent (Django's test client re-escapes broken UTF-8 before the handler)."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.test.client import RequestFactory

    environ = RequestFactory()._base_environ(
        PATH_INFO=unquote_to_bytes(path).decode("latin-1"), RAW_URI=path, REQUEST_METHOD="GET")
    return WSGIHandler()(environ, lambda status, headers: None)


@pytest.mark.parametrize("path, byte", [("/runs/%ff/", "0xff at offset 13"),
                                        ("/runs/%ff/events/", "0xff at offset 13"),
                                        ("/forks/%c3%28/", "0xc3 at offset 14"),
                                        ("/nowhere/%80", "0x80 at offset 16")])
def test_a_path_whose_escapes_are_not_utf8_is_invalid_input(path: str, byte: str) -> None:
    response = wsgi_get(f"{API}{path}")
    body = json.loads(response.content)
    assert (response.status_code, body["code"], body["path"]) == (
        400, "invalid_input", "the URL path")
    assert f"the URL path: byte {byte} is not UTF-8" in body["detail"]


def test_a_path_with_escaped_utf8_still_resolves(world: World) -> None:
    response = world.client("admin").get(f"{API}/runs/%C3%A9/")
    assert response.status_code == 404 and response.json()["run_id"] == "é"


def test_a_path_whose_escapes_are_not_utf8_is_refused_under_asgi() -> None:
    import io

    from django.core.handlers.asgi import ASGIRequest

    from forklab.runs.middleware import refusal

    scope = {"type": "http", "method": "GET", "path": f"{API}/runs/\ufffd/",
             "raw_path": f"{API}/runs/%ff/".encode(), "query_string": b"", "headers": []}
    response = refusal(ASGIRequest(scope, io.BytesIO()))
    assert response is not None and response.status_code == 400
    assert json.loads(response.content)["code"] == "invalid_input"


def chain(count: int, graph_id: str = "chain") -> dict[str, Any]:
    return {"id": graph_id, "start": "n0",
            "nodes": [{"id": f"n{i}", "kind": "router", "default": "end"}
                      for i in range(count)],
            "edges": [{"from": f"n{i}", "to": f"n{i + 1}"} for i in range(count - 1)]}


def test_a_graph_of_ten_thousand_nodes_registers(world: World) -> None:
    response = world.client("admin").post(f"{API}/graphs/", {"project": "lab",
                                                             "spec": chain(10_000)},
                                          content_type="application/json")
    assert response.status_code == 201, response.json()
    assert Graph.objects.filter(graph_id="chain").exists()


def test_a_graph_over_the_node_limit_is_invalid_input(world: World) -> None:
    response = world.client("admin").post(f"{API}/graphs/", {
        "project": "lab", "spec": chain(MAX_GRAPH_NODES + 1, "huge")},
        content_type="application/json")
    assert_refused(response, 400, "invalid_input", f"over the limit of {MAX_GRAPH_NODES}")
    assert not Graph.objects.filter(graph_id="huge").exists()


# -- races and gaps ------------------------------------------------------------------------


def test_a_fork_of_an_unseen_run_is_not_found_whether_it_exists_or_not(world: World) -> None:
    hidden = world.demo_runs["diamond"]  # exists, in a project the member cannot see
    answers = []
    for base in (hidden, "0" * 32):
        for path in ("/forks/", "/forks/preflight/"):
            response = world.client("member").post(f"{API}{path}", {
                "base_run": base, "at": "start", "client_request_id": "probe",
                "run_id": hidden}, content_type="application/json")
            body = response.json()
            answers.append((response.status_code, body["code"],
                            body["detail"].replace(base, "<id>")))
    assert answers == [(404, "not_found", "no run '<id>'")] * 4


def test_a_client_request_id_reused_with_another_body_is_an_idempotency_conflict(
        world: World) -> None:
    client = world.client("member")
    body = {"base_run": world.lab_diamond, "at": {"before_node": "left"}, "changes": [PROMPT],
            "client_request_id": "once"}
    first = client.post(f"{API}/forks/", body, content_type="application/json")
    same = client.post(f"{API}/forks/", body, content_type="application/json")
    assert (first.status_code, same.status_code) == (202, 200)
    assert same.json()["id"] == first.json()["id"]
    other = client.post(f"{API}/forks/", {**body, "label": "different"},
                        content_type="application/json")
    conflict = assert_refused(other, 422, "idempotency_conflict", "'once' was already used")
    assert conflict["run_id"] == first.json()["id"]
    assert Run.objects.filter(parent_run_id=world.lab_diamond, label="different").count() == 0


WRITER = {"id": "writer", "start": "send", "nodes": [
    {"id": "send", "kind": "tool", "tool": "forklab.engine.scenarios.tools.send_email",
     "effect": "write", "reads": [], "writes": ["receipt"]}]}


def test_recording_a_graph_with_live_write_tools_needs_an_admin(world: World) -> None:
    registered = world.client("admin").post(f"{API}/graphs/", {"project": "lab",
                                                               "spec": WRITER},
                                            content_type="application/json")
    assert registered.status_code == 201, registered.json()
    before = Run.objects.count()
    refused = world.client("member").post(f"{API}/runs/", {"graph": "writer", "project": "lab"},
                                          content_type="application/json")
    body = assert_refused(refused, 403, "permission_denied", "live write tools (send)")
    assert body["required"] == "admin"
    assert Run.objects.count() == before
    accepted = world.client("admin").post(f"{API}/runs/", {"graph": "writer", "project": "lab"},
                                          content_type="application/json")
    assert accepted.status_code == 202
