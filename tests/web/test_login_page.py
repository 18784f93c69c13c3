"""The login page names the demo login on a demo install, and only there."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from forklab.runs.services import ensure_demo_user, ensure_project

pytestmark = pytest.mark.django_db

HINT = "log in as <strong>demo</strong> / <strong>demo</strong>"


def login_page() -> str:
    response = Client().get("/accounts/login/")
    assert response.status_code == 200
    return response.content.decode()


def test_the_login_page_of_a_demo_install_names_the_demo_login() -> None:
    ensure_demo_user(project=ensure_project(slug="demo", name="Demo"))
    assert HINT in login_page()


def test_the_login_page_names_no_login_without_the_demo_user() -> None:
    get_user_model().objects.create_user("alice", password="pw")
    assert "demo" not in login_page().lower()


def test_the_login_page_names_no_login_once_the_demo_password_changed() -> None:
    user = ensure_demo_user(project=ensure_project(slug="demo", name="Demo"))
    assert HINT in login_page()
    user.set_password("changed")
    user.save()
    assert "demo" not in login_page().lower()
