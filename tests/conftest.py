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
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

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

# Every @given test outside the property suite (which has its own profiles) runs under this
# profile: no per-example deadline and no "too slow" health check. Both are timing
# assertions, which fail on a loaded 2-core CI host for reasons that have nothing to do with
# the property (a cold first draw took 1.45 s there while pip ran beside it).
hypothesis_settings.register_profile(
    "forklab-default", deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
hypothesis_settings.load_profile("forklab-default")

if POSTGRES_URL:
    settings.DATABASES["pg"] = database_from_url(POSTGRES_URL)
    # The test database is thrown away: its commits need not wait for the server's WAL
    # flush (synchronous_commit=off changes durability after a server crash only, never
    # what another connection sees or when). The store tests commit per append and
    # transactional tests truncate every table after each test, each a waited-for flush.
    settings.DATABASES["pg"].setdefault("OPTIONS", {})["options"] = "-c synchronous_commit=off"
    # If anything read the database settings already, make it read them again.
    connections.__dict__.pop("settings", None)

requires_postgres = pytest.mark.skipif(
    not POSTGRES_URL, reason="FORKLAB_TEST_POSTGRES_URL is not set (./dev test sets it)"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("postgres") is not None:
            item.add_marker(requires_postgres)
    unique_node_ids(items)
    schedule_for_xdist(items, suffix_groups=bool(config.getoption("loadgroup", default=False)))


def _set_node_id(item: pytest.Item, nodeid: str) -> None:
    # pytest 9 keeps the id in ``_id`` (a NodeId); ``_nodeid`` is what xdist 3.8 still sets
    # for its own ``@group`` suffix, which pytest 9 ignores (so xdist_group did nothing).
    if hasattr(item, "_id"):
        item._id = type(item._id).parse(nodeid)
    else:  # pragma: no cover - pytest < 9
        item._nodeid = nodeid


def unique_node_ids(items: list[pytest.Item]) -> None:
    """Give every test its own node id.

    schemathesis' ``schema.parametrize()`` collects one item per API operation, all under the
    test function's bare node id (the operation is only in ``item.name``). xdist schedules by
    node id, so under ``-n`` only the first operation was ever fuzzed (1 of 23). Each such
    item's id becomes ``<parent>::<name>``, e.g. ``...::test_x[GET /api/v1/runs/]``.
    """
    seen: dict[str, int] = {}
    for item in items:
        seen[item.nodeid] = seen.get(item.nodeid, 0) + 1
    for item in items:
        if seen[item.nodeid] > 1 and item.parent is not None:
            _set_node_id(item, f"{item.parent.nodeid}::{item.name}")


# Fixtures of these scopes build a world once per module (or class); their module's tests
# must stay together on one worker, or the world is built again on the other one.
_SHARED_SCOPES = {"module", "class", "package"}


def _shares_a_world(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    # plugin fixtures (baseid "") are left out: pytest-django's class-scoped autouse
    # ``_django_setup_unittest`` is in every test's closure and builds nothing
    return any(defs[-1].scope in _SHARED_SCOPES and defs[-1].baseid
               for defs in info.name2fixturedefs.values())


def _tier(item: pytest.Item) -> int:
    """Expected cost class, dearest first: ``slow``-marked tests (10,000-node graphs, real
    processes killed), then hypothesis/schemathesis properties (each draws dozens of runs),
    then everything else."""
    if item.get_closest_marker("slow") is not None:
        return 0
    if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        return 1
    return 2


def schedule_for_xdist(items: list[pytest.Item], *, suffix_groups: bool) -> None:
    """Group and order the collection for the main session (``--dist loadgroup
    --no-loadscope-reorder``, see ``dev``).

    Invariants:
    - every test of a module with a module/class-scoped fixture carries
      ``xdist_group(<module>)``, so the module runs whole on one worker and builds its world
      once; every other test is its own work unit and goes to whichever worker is free;
    - the order is dearest first (``_tier``; a group takes its dearest member's tier) and,
      within a tier, pytest-randomly's shuffled order (a stable sort), so the long tests start
      at once on both workers and the cheap ones fill the tail instead of one worker
      finishing a 100-second test alone. The order is a function of the collection and the
      seed, so every xdist worker computes the same one (xdist requires it).
    Under ``--dist loadgroup`` a grouped test's id gets xdist's ``@<group>`` suffix here (what
    xdist itself does, but through an attribute pytest 9 no longer reads). Without xdist the
    groups are inert markers and the order is only an order.
    """
    unit_tier: dict[str, int] = {}
    units: list[str] = []
    for item in items:
        unit = item.nodeid
        if _shares_a_world(item):
            unit = item.nodeid.split("::", 1)[0]
            item.add_marker(pytest.mark.xdist_group(unit))
            if suffix_groups:
                _set_node_id(item, f"{item.nodeid}@{unit}")
        units.append(unit)
        unit_tier[unit] = min(unit_tier.get(unit, 3), _tier(item))
    order = {id(item): (unit_tier[unit], i)
             for i, (item, unit) in enumerate(zip(items, units, strict=True))}
    items.sort(key=lambda item: order[id(item)])


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
