"""Test configuration shared by every test.

Django is configured by pytest-django (``DJANGO_SETTINGS_MODULE`` in pyproject). Engine tests
use no database: pytest-django only creates a test database for tests marked ``django_db``.

PostgreSQL: when ``FORKLAB_TEST_POSTGRES_URL`` is set (``./dev test`` sets it), a second
database alias ``pg`` points at that server, so store tests run against SQLite and
PostgreSQL in one pytest run. Tests needing it are marked ``postgres`` and skipped without it.
"""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from django.db import connections

from forklab.settings import database_from_url

POSTGRES_URL = os.environ.get("FORKLAB_TEST_POSTGRES_URL", "")

if POSTGRES_URL:
    settings.DATABASES["pg"] = database_from_url(POSTGRES_URL)
    # If anything read the database settings already, make it read them again.
    connections.__dict__.pop("settings", None)

requires_postgres = pytest.mark.skipif(
    not POSTGRES_URL, reason="FORKLAB_TEST_POSTGRES_URL is not set (./dev test sets it)"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("postgres") is not None:
            item.add_marker(requires_postgres)
