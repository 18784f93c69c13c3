"""The minimal landing page and the health check."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from forklab.engine.scenarios import SCENARIOS
from forklab.runs.models import Membership, Project, Role
from forklab.runs.services import record_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_projects() -> dict[str, str]:
    runs = {}
    for slug, scenario in (("alpha", "diamond"), ("beta", "research-write")):
        project = Project.objects.create(slug=slug, name=slug.title())
        run = record_run(project=project, graph=SCENARIOS[scenario].graph(),
                         input=SCENARIOS[scenario].input)
        runs[slug] = run.id
    return runs


def login(client: Client, username: str, *, project: str | None = None,
          superuser: bool = False) -> None:
    user = get_user_model().objects.create_user(username, password="pw", is_superuser=superuser)
    if project:
        Membership.objects.create(user=user, project=Project.objects.get(slug=project),
                                  role=Role.VIEWER)
    client.force_login(user)


def test_healthz_answers_ok_with_the_database_vendor(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "sqlite"}


def test_the_landing_page_asks_anonymous_visitors_to_log_in(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert client.get(response["Location"]).status_code == 200


def test_a_member_sees_the_runs_of_their_project_only(
    client: Client, two_projects: dict[str, str],
) -> None:
    login(client, "ada", project="alpha")
    page = client.get("/").content.decode()
    assert f'id="run-{two_projects["alpha"]}"' in page
    assert two_projects["beta"] not in page
    assert "diamond" in page and "completed" in page and "primary" in page


def test_a_superuser_sees_every_project(client: Client, two_projects: dict[str, str]) -> None:
    login(client, "root", superuser=True)
    page = client.get("/").content.decode()
    assert all(f'id="run-{run_id}"' in page for run_id in two_projects.values())


def test_the_demo_login_works_after_demo(client: Client) -> None:
    from django.core.management import call_command

    call_command("demo", stdout=StringIO())
    response = client.post("/accounts/login/", {"username": "demo", "password": "demo"})
    assert response.status_code == 302 and response["Location"] == "/"
    page = client.get("/").content.decode()
    assert page.count('id="run-') == len(SCENARIOS)
