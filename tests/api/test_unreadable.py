"""Rows an older version stored with a lone surrogate (SQLite kept it inside JSON; no
response can encode it) never break a list, a run, its events or its stream for anyone: they
read as *unreadable*, and a project admin can delete them (API and dashboard)."""

from __future__ import annotations

import pytest

from forklab.runs.models import Event, Run
from tests.api.conftest import API, World

pytestmark = pytest.mark.django_db


def spoil(run_id: str) -> None:
    """What an older version could leave behind."""
    Run.objects.filter(pk=run_id).update(input={"task": "old \ud800"},
                                         memory={"task": "old \ud800"})
    event = Event.objects.get(run_id=run_id, seq=1)
    event.payload = {**event.payload, "input": {"task": "old \ud800"}}
    event.save()


def test_an_unreadable_run_reads_as_unreadable_in_the_list_and_alone(world: World) -> None:
    spoil(world.lab_diamond)
    client = world.client("viewer")
    listed = client.get(f"{API}/runs/")
    assert listed.status_code == 200
    rows = {r["id"]: r for r in listed.json()["results"]}
    assert rows[world.lab_diamond]["error"]["code"] == "unreadable"
    assert rows[world.lab_diamond]["input"] == {} and rows[world.lab_diamond]["memory"] == {}
    assert rows[world.lab_paused]["error"] is None  # the others read as usual
    alone = client.get(f"{API}/runs/{world.lab_diamond}/")
    assert alone.status_code == 200 and alone.json()["error"]["code"] == "unreadable"
    events = client.get(f"{API}/runs/{world.lab_diamond}/events/").json()["results"]
    assert events[0]["payload"]["unreadable"] is True
    assert events[1]["payload"] == Event.objects.get(run_id=world.lab_diamond, seq=2).payload


def test_an_admin_deletes_an_unreadable_run_and_others_may_not(world: World) -> None:
    spoil(world.lab_diamond)
    for who in ("viewer", "member"):
        refused = world.client(who).delete(f"{API}/runs/{world.lab_diamond}/")
        assert refused.status_code == 403 and refused.json()["required"] == "admin"
    assert world.client("demo").delete(f"{API}/runs/{world.lab_diamond}/").status_code == 404
    assert world.client("admin").delete(f"{API}/runs/{world.lab_diamond}/").status_code == 204
    assert not Run.objects.filter(pk=world.lab_diamond).exists()
    assert not Event.objects.filter(run_id=world.lab_diamond).exists()


def test_an_admin_deletes_it_from_the_dashboard(world: World) -> None:
    from django.test import Client

    spoil(world.lab_diamond)
    browser = Client()
    browser.force_login(world.users["admin"])
    page = browser.get(f"/runs/{world.lab_diamond}/")
    assert page.status_code == 200 and f"/runs/{world.lab_diamond}/delete/" in page.content.decode()
    done = browser.post(f"/runs/{world.lab_diamond}/delete/")
    assert done.status_code == 302 and not Run.objects.filter(pk=world.lab_diamond).exists()


def test_a_running_run_is_not_deleted(world: World) -> None:
    Run.objects.filter(pk=world.lab_diamond).update(status="running")
    refused = world.client("admin").delete(f"{API}/runs/{world.lab_diamond}/")
    assert refused.status_code == 409 and refused.json()["code"] == "run_in_progress"
