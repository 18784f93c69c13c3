"""``forklab serve``: migrate, collect static files, optionally the demo runs, then daphne."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from forklab.console import main
from forklab.runs.management.commands import serve
from forklab.runs.models import Run
from tests.golden_runs import install_golden_demo

# transaction: serve closes its database connections before daphne starts (as the verbs do)
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def daphne(monkeypatch: pytest.MonkeyPatch, settings: Any,
           tmp_path: Path) -> list[tuple[str, int]]:
    """Where serve would start daphne (it is not started); static files go to tmp_path."""
    settings.STATIC_ROOT = tmp_path / "static"
    started: list[tuple[str, int]] = []
    monkeypatch.setattr(serve, "start_daphne", lambda host, port: started.append((host, port)))
    return started


def test_serve_collects_static_files_then_starts_daphne_where_asked(
        daphne: list[tuple[str, int]], settings: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    main(["serve", "--host", "0.0.0.0", "--port", "8123"])
    assert daphne == [("0.0.0.0", 8123)]
    assert (Path(settings.STATIC_ROOT) / "staticfiles.json").exists()
    printed = capsys.readouterr()
    assert ("forklab is serving at http://0.0.0.0:8123/  (health: http://0.0.0.0:8123/healthz)"
            in printed.out)
    assert "no login yet: create one with `forklab createsuperuser`" in printed.out
    assert "400 until FORKLAB_ALLOWED_HOSTS lists it" in printed.err


def test_serve_on_a_public_address_says_nothing_of_hosts_once_they_are_named(
        daphne: list[tuple[str, int]], settings: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    settings.ALLOWED_HOSTS = ["forklab.example.com"]
    main(["serve", "--host", "0.0.0.0", "--json"])
    assert daphne == [("0.0.0.0", 8000)] and "FORKLAB_ALLOWED_HOSTS" not in capsys.readouterr().err


def test_serve_demo_installs_the_demo_runs_and_names_the_login(
        daphne: list[tuple[str, int]], capsys: pytest.CaptureFixture[str]) -> None:
    main(["serve", "--demo", "--json"])
    assert daphne == [("127.0.0.1", 8000)]
    printed = json.loads(capsys.readouterr().out)
    assert printed == {"url": "http://127.0.0.1:8000/", "health": "http://127.0.0.1:8000/healthz",
                       "login": "log in as demo / demo"}
    assert Run.objects.filter(project__slug="demo").count() >= 8


def test_serve_without_demo_names_no_login_once_the_demo_password_changed(
        daphne: list[tuple[str, int]], capsys: pytest.CaptureFixture[str]) -> None:
    install_golden_demo()
    user = get_user_model().objects.get(username="demo")
    user.set_password("a-real-secret")
    user.save()
    main(["serve", "--json"])
    assert json.loads(capsys.readouterr().out)["login"] == "log in with your forklab account"
