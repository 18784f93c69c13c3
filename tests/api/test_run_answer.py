"""``POST /runs/{id}/answer/``: a primary run paused at an approval gate — recorded with
``POST /runs/`` — is answered through the API as a paused fork is, with the same rules: the
member role, the first answer wins, undeclared keys refused with nothing stored."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from forklab.runs import tasks
from forklab.runs.models import Event, Run
from forklab.runs.task_backends import drain
from tests.api.conftest import API, World

pytestmark = pytest.mark.django_db(transaction=True)


def post(client: Client, path: str, body: Any) -> Any:
    return client.post(f"{API}{path}", body, content_type="application/json")


def unchanged(run_id: str) -> tuple[Any, ...]:
    row = Run.objects.get(pk=run_id)
    return (row.status, row.work, row.last_seq,
            list(Event.objects.filter(run_id=run_id).values_list("seq", flat=True)))


def test_a_paused_primary_answered_through_the_api_continues_to_its_end(
        fresh_world: World) -> None:
    paused = fresh_world.lab_paused
    response = post(fresh_world.client("member"), f"/runs/{paused}/answer/",
                    {"decision": "rejected"})
    assert response.status_code == 202, response.json()
    assert response.json()["id"] == paused
    assert drain(timeout=60), "background tasks did not finish"
    done = fresh_world.client("member").get(f"{API}/runs/{paused}/").json()
    assert done["status"] == "completed"
    assert "send_email" not in [step["node"] for step in done["path"]]  # rejected: no email


def test_a_second_answer_is_409_and_an_undeclared_key_is_422_with_nothing_stored(
        fresh_world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    paused, client = fresh_world.lab_paused, fresh_world.client("member")
    held: list[str] = []
    monkeypatch.setattr(tasks, "enqueue_answer", lambda run_id, answer: held.append(run_id))
    before = unchanged(paused)

    refused = post(client, f"/runs/{paused}/answer/",
                   {"decision": "edited", "memory_updates": {"email": "eve@example.com"}})
    assert refused.status_code == 422
    assert (refused.json()["code"], refused.json()["field"]) == (
        "invalid_overrides", "memory_updates.email")
    assert unchanged(paused) == before and held == []

    assert post(client, f"/runs/{paused}/answer/", {"decision": "approved"}).status_code == 202
    again = post(client, f"/runs/{paused}/answer/", {"decision": "rejected"})
    assert (again.status_code, again.json()["code"]) == (409, "already_answered")
    assert held == [paused]


@pytest.mark.parametrize(("who", "run", "status", "code"), [
    ("viewer", "paused", 403, "permission_denied"),
    ("member", "finished", 409, "invalid_run_state"),
    ("member", "unknown", 404, "not_found"),
    (None, "paused", 401, "not_authenticated"),
])
def test_an_answer_nobody_may_give_is_refused_and_changes_nothing(
        fresh_world: World, who: str | None, run: str, status: int, code: str) -> None:
    run_id = {"paused": fresh_world.lab_paused, "finished": fresh_world.lab_diamond,
              "unknown": "no-such-run"}[run]
    before = unchanged(run_id) if run != "unknown" else None
    response = post(fresh_world.client(who), f"/runs/{run_id}/answer/", {"decision": "approved"})
    assert (response.status_code, response.json()["code"]) == (status, code)
    if before is not None:
        assert unchanged(run_id) == before


def test_a_viewers_answer_is_403_whatever_its_body_holds(fresh_world: World) -> None:
    for path in (f"/runs/{fresh_world.lab_paused}/answer/", "/forks/anything/answer/"):
        response = post(fresh_world.client("viewer"), path, {"decision": 5})
        code = "permission_denied" if path.startswith("/runs/") else "not_found"
        assert response.json()["code"] == code, response.json()


def test_an_answer_body_with_an_unknown_field_is_400(fresh_world: World) -> None:
    response = post(fresh_world.client("member"), f"/runs/{fresh_world.lab_paused}/answer/",
                    {"decision": "approved", "note": "x"})
    assert response.status_code == 400
