"""Test configuration shared by every test.

Django is configured by pytest-django (``DJANGO_SETTINGS_MODULE`` in pyproject). Engine tests
use no database: pytest-django only creates a test database for tests marked ``django_db``.

PostgreSQL: when ``FORKLAB_TEST_POSTGRES_URL`` is set (``./dev test`` sets it), a second
database alias ``pg`` points at that server, so store tests run against SQLite and
PostgreSQL in one pytest run. Tests needing it are marked ``postgres`` and skipped without it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connections

from forklab.settings import database_from_url

POSTGRES_URL = os.environ.get("FORKLAB_TEST_POSTGRES_URL", "")

# No background recovery sweeps inside the test process (importing forklab.asgi would start
# one): tests call forklab.runs.recovery.sweep themselves, and the fault tests run real
# servers and workers with sweeping on.
settings.FORKLAB_RECOVERY_SWEEP_S = 0

# Every test world creates users with passwords; the production hasher (PBKDF2, over a million
# iterations) costs about half a CPU second per user, which made it the biggest single cost
# of building a world. Passwords made here are only ever checked in this process (the browser
# and fault tests' servers hash their own users), so the fast hasher is safe and enough.
settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

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


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Before the test databases are dropped, end PostgreSQL sessions that threads opened.

    Django keeps one connection per thread and never closes those of finished threads
    (the store contract's concurrency test appends from threads); PostgreSQL refuses to drop
    a database that still has sessions.
    """
    yield
    with django_db_blocker.unblock():
        for alias in connections:
            connection = connections[alias]
            if connection.vendor != "postgresql":
                continue
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
