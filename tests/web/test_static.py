"""Static files: served by WhiteNoise under content-hashed names once collected (no stale JS or
CSS after a deploy), and under their own names before ``collectstatic`` has run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

from tests.web.conftest import World, page

pytestmark = pytest.mark.django_db


def test_collected_static_files_have_hashed_names_served_with_far_future_caching(
        world: World, tmp_path: Path) -> None:
    with override_settings(STATIC_ROOT=tmp_path, DEBUG=False):
        call_command("collectstatic", interactive=False, verbosity=0)
        client = Client()
        client.force_login(world.users["bob"])
        html = page(client.get("/"))
        css = re.search(r'href="(/static/forklab\.[0-9a-f]{12}\.css)"', html)
        js = re.search(r'src="(/static/forklab\.[0-9a-f]{12}\.js)"', html)
        assert css and js, "pages link the hashed names"
        response = client.get(css.group(1))
        assert response.status_code == 200
        assert "immutable" in response["Cache-Control"]
        assert b"".join(response.streaming_content).startswith(b"/* forklab dashboard")
        assert (tmp_path / "staticfiles.json").exists()


def test_before_collectstatic_pages_link_the_plain_names(world: World, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with override_settings(STATIC_ROOT=tmp_path / "empty", DEBUG=False):
        html = page(world.client("bob").get("/"))
    assert 'href="/static/forklab.css"' in html and 'src="/static/forklab.js"' in html
