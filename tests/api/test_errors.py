"""One error shape and one status map for every failure: forklab's, DRF's and Django's."""

from __future__ import annotations

import pytest

from forklab.api.errors import exception_handler
from forklab.engine.errors import ForklabError
from forklab.runs import queries
from forklab.runs.error_status import DEFAULT_STATUS, STATUS, status_for
from tests.api.conftest import API, World

pytestmark = pytest.mark.django_db


def every_error_code() -> set[str]:
    import forklab.runs.forking
    import forklab.runs.tasks  # noqa: F401  (defines error classes)

    codes, todo = set(), [ForklabError]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if not cls.__name__.startswith("_"):
            codes.add(cls.code)
    return codes - {"forklab_error"}


def test_every_forklab_error_code_has_a_status() -> None:
    unmapped = sorted(code for code in every_error_code() if code not in STATUS)
    assert unmapped == []


@pytest.mark.parametrize(("code", "status"), [
    ("invalid_request", 400), ("invalid_argument", 400), ("invalid_graph", 400),
    ("unknown_node", 400), ("unbounded_cycle", 400),
    ("fork_point_not_found", 422), ("fork_point_mid_node", 422), ("invalid_change", 422),
    ("invalid_overrides", 422), ("conflicting_changes", 422), ("unpriced_model", 422),
    ("live_budget_exceeded", 422), ("write_not_allowed", 422), ("prefix_diverged", 422),
    ("version_skew", 422), ("source_missing", 422), ("replay_divergence", 422),
    ("permission_denied", 403), ("not_found", 404),
    ("run_in_progress", 409), ("promote_conflict", 409), ("invalid_run_state", 409),
    ("case_exists", 409),
    ("imported_run", 422), ("one_call_only", 422), ("call_not_replayable", 422),
    ("trace_arriving", 409),
])
def test_the_status_map_follows_the_spec(code: str, status: int) -> None:
    assert status_for(code) == status


def test_an_unknown_code_is_the_callers_error() -> None:
    assert status_for("something_new") == DEFAULT_STATUS == 400


def test_the_error_body_carries_code_detail_and_context() -> None:
    class Custom(ForklabError):
        code = "fork_point_not_found"

    response = exception_handler(Custom("no such point", node="write", tried={"a", }), {})
    assert response.status_code == 422
    assert response.data == {"code": "fork_point_not_found", "detail": "no such point",
                             "node": "write", "tried": ["a"]}


def test_context_never_overrides_code_or_detail() -> None:
    response = exception_handler(ForklabError("real", code="fake", detail="fake"), {})
    assert response.data == {"code": "forklab_error", "detail": "real"}


def test_anonymous_requests_get_401_with_the_token_challenge(world: World) -> None:
    response = world.client(None).get(f"{API}/runs/")
    assert response.status_code == 401
    assert response.json() == {"code": "not_authenticated",
                               "detail": "Authentication credentials were not provided."}
    assert response["WWW-Authenticate"] == "Token"


def test_a_wrong_token_is_authentication_failed(world: World) -> None:
    from django.test import Client

    response = Client(headers={"Authorization": "Token nope"}).get(f"{API}/runs/")
    assert response.status_code == 401
    assert response.json() == {"code": "authentication_failed", "detail": "Invalid token."}


def test_a_session_login_works_too(world: World) -> None:
    from django.test import Client

    client = Client()
    client.force_login(world.users["viewer"])
    assert client.get(f"{API}/runs/").status_code == 200


def test_malformed_json_is_a_parse_error(world: World) -> None:
    response = world.client("admin").post(f"{API}/forks/", "{nope",
                                          content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"
    assert response.json()["detail"].startswith("JSON parse error")


def test_a_body_that_is_not_json_is_unsupported(world: World) -> None:
    response = world.client("admin").post(f"{API}/forks/", "base_run=x",
                                          content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert response.json() == {
        "code": "unsupported_media_type",
        "detail": 'Unsupported media type "application/x-www-form-urlencoded" in request.'}


def test_a_json_body_that_is_not_an_object_is_invalid(world: World) -> None:
    response = world.client("admin").post(f"{API}/forks/", [1, 2],
                                          content_type="application/json")
    assert response.status_code == 400
    assert response.json() == {"code": "invalid_request",
                               "detail": "the request body must be a JSON object, got a list"}


def test_an_unknown_method_is_405(world: World) -> None:
    response = world.client("admin").delete(f"{API}/runs/")
    assert response.status_code == 405
    assert response.json() == {"code": "method_not_allowed",
                               "detail": 'Method "DELETE" not allowed.'}


def test_an_unknown_path_under_api_is_a_json_404(world: World) -> None:
    response = world.client("admin").get(f"{API}/nothing/here/")
    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "detail": "no endpoint /api/v1/nothing/here/"}


def test_a_get_without_the_trailing_slash_is_redirected(world: World) -> None:
    response = world.client("admin").get(f"{API}/runs?status=completed")
    assert response.status_code == 301
    assert response["Location"] == f"{API}/runs/?status=completed"


@pytest.mark.parametrize("csrf_checks", [False, True])
def test_a_post_without_the_trailing_slash_names_the_right_path(world: World,
                                                                csrf_checks: bool) -> None:
    from django.test import Client

    client = Client(enforce_csrf_checks=csrf_checks,  # as a real client is: no CSRF cookie
                    headers={"Authorization": f"Token {world.tokens['admin']}"})
    response = client.post(f"{API}/forks", {}, content_type="application/json")
    assert response.status_code == 404, response.content[:200]
    assert response.json() == {
        "code": "not_found",
        "detail": "no endpoint /api/v1/forks; API paths end in a slash: /api/v1/forks/"}


def test_an_unexpected_exception_is_a_logged_json_500(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(queries, "get_run", broken)
    response = world.client("admin").get(f"{API}/runs/{world.lab_diamond}/")
    assert response.status_code == 500
    assert response.json() == {"code": "internal_error",
                               "detail": "an unexpected error occurred; it has been logged"}
    assert "unhandled error in run_detail" in caplog.text


def test_drf_create_token_issues_a_working_token(world: World) -> None:
    from io import StringIO

    from django.core.management import call_command
    from django.test import Client

    out = StringIO()
    call_command("drf_create_token", "member", "--reset", stdout=out)
    key = out.getvalue().split()[2]
    response = Client(headers={"Authorization": f"Token {key}"}).get(f"{API}/runs/")
    assert response.status_code == 200 and response.json()["count"] == 2
