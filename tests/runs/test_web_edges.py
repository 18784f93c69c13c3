"""The dashboard's edge: forms and URLs carrying what no store can keep are a clear 4xx, never
a 500, and nothing is stored; huge page numbers are clamped."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from forklab.engine.scenarios import SCENARIOS
from forklab.runs.models import Membership, Project, Role, Run
from forklab.runs.services import record_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser() -> tuple[Client, Run]:
    project = Project.objects.create(slug="web", name="Web")
    user = get_user_model().objects.create_user("member", password="pw")
    Membership.objects.create(user=user, project=project, role=Role.MEMBER)
    run = record_run(project=project, graph=SCENARIOS["research-write"].graph(),
                     input=SCENARIOS["research-write"].input)
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client, run


def compose(client: Client, run: Run, **fields: Any) -> Any:
    """Submit the composer at the run's first fork point."""
    from forklab.engine.fork import fork_points
    from forklab.runs.store import DjangoStore

    at = fork_points(DjangoStore(run.project).read(run.id))[0].seq
    return client.post(f"/runs/{run.id}/fork/", {"at": str(at), **fields})


@pytest.mark.parametrize("fields, says", [
    ({"label": "a\x00b"}, "form field 'label': the string holds a NUL character"),
    ({"memory_set": "[" * 5000 + "]" * 5000}, "form field 'memory_set': the JSON is nested"),
    ({"memory_set": '{"a": ' * 3000 + "1" + "}" * 3000}, "nested deeper than 64 levels"),
])
def test_a_form_field_no_store_can_keep_is_a_400(browser: tuple[Client, Run],
                                                 fields: dict[str, str], says: str) -> None:
    client, run = browser
    before = Run.objects.count()
    response = compose(client, run, **fields)
    assert response.status_code == 400, response.content[:300]
    assert says in response.content.decode()
    assert Run.objects.count() == before


@pytest.mark.parametrize("memory_set, says", [
    ('{"notes": "x\\ud800"}', "the string"),
    ('{"notes": NaN}', "NaN is not valid JSON"),
    ('{"notes": "\\u0000"}', "NUL character"),
])
def test_a_json_editor_value_no_store_can_keep_is_refused_in_the_form(
        browser: tuple[Client, Run], memory_set: str, says: str) -> None:
    client, run = browser
    before = Run.objects.count()
    response = compose(client, run, memory_set=memory_set)
    assert 400 <= response.status_code < 500, response.content[:300]
    assert says in response.content.decode()
    assert Run.objects.count() == before


@pytest.mark.parametrize("query", ["epage=100000000000000000000", "epage=-100000000000000000",
                                   "tl=100000000000000000000", "at=100000000000000000000",
                                   "page=100000000000000000000"])
def test_huge_page_numbers_are_clamped_not_a_500(browser: tuple[Client, Run],
                                                 query: str) -> None:
    client, run = browser
    assert client.get(f"/runs/{run.id}/?{query}").status_code == 200
    assert client.get(f"/?{query}").status_code == 200


@pytest.mark.parametrize("path", ["/?q=%00", "/runs/%00/", "/?graph=a%00"])
def test_a_nul_in_a_dashboard_url_is_a_400(browser: tuple[Client, Run], path: str) -> None:
    client, _ = browser
    response = client.get(path)
    assert response.status_code == 400 and b"NUL character" in response.content
