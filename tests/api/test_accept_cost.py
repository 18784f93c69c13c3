"""What accepting a fork costs in SQL: a count, so the accept path cannot quietly grow.

``POST /forks/`` by token, once its base run is loaded in the process (the first request
for a base reads its log once; ``forklab.runs.bases``), by a token the process confirmed
moments ago (``forklab.api.auth``): the base run with the caller's role, one transaction holding the queued row (and, with an atomic task backend,
the queue's task row), and the queue position. These tests run in a rolled-back
transaction, so ``transaction.atomic`` shows as a savepoint and the thread pool's task never
starts.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from forklab.runs.models import Run
from forklab.runs.readmodel import queue_position
from tests.api.conftest import API, World

pytestmark = pytest.mark.django_db

#: base run + role, SAVEPOINT, INSERT run, RELEASE SAVEPOINT, queue position (the token
#: was confirmed by the first request: forklab.api.auth)
ACCEPT_QUERIES = 5


def fork_request(world: World, n: int) -> dict[str, Any]:
    return {"base_run": world.lab_diamond, "at": {"before_node": "left"}, "label": f"try {n}",
            "changes": [{"kind": "prompt", "target": "left", "system_prompt": f"Variant {n}."}]}


def accept(world: World, n: int) -> tuple[Any, list[str]]:
    client = world.client("member")
    with CaptureQueriesContext(connection) as queries:
        response = client.post(f"{API}/forks/", fork_request(world, n),
                               content_type="application/json")
    assert response.status_code == 202, response.json()
    return response.json(), [q["sql"] for q in queries.captured_queries]


def test_accepting_a_fork_costs_a_fixed_handful_of_queries(world: World) -> None:
    accept(world, 0)  # loads the base run into the process once
    for n in (1, 2):
        _fork, sql = accept(world, n)
        assert len(sql) <= ACCEPT_QUERIES, "\n".join(sql)


def test_accepting_a_fork_does_not_read_the_base_runs_state(world: World) -> None:
    accept(world, 0)
    _fork, sql = accept(world, 1)
    reads = [q for q in sql if q.startswith("SELECT") and '"runs_run"' in q]
    assert reads, "\n".join(sql)
    for column in ("memory", "path", "input", "work"):
        assert not any(f'"runs_run"."{column}"' in q for q in reads), "\n".join(reads)


def test_the_queued_fork_carries_its_task_id_from_the_start(world: World) -> None:
    fork, sql = accept(world, 0)
    assert Run.objects.get(pk=fork["id"]).task_id  # written with the row: no UPDATE after
    assert not any(q.startswith("UPDATE") for q in sql), "\n".join(sql)


def test_each_accepted_fork_reports_its_place_behind_the_untaken_queued_work(
        world: World) -> None:
    forks = [accept(world, n)[0] for n in range(3)]
    first = forks[0]["queue_position"]
    assert first >= 1
    assert [f["queue_position"] for f in forks] == [first, first + 1, first + 2]
    Run.objects.filter(pk=forks[0]["id"]).update(lease_owner="worker-1")  # taken
    assert queue_position(Run.objects.get(pk=forks[0]["id"])) == 0
    assert queue_position(Run.objects.get(pk=forks[2]["id"])) == first + 1
    Run.objects.filter(pk=forks[1]["id"]).update(status="running")
    assert queue_position(Run.objects.get(pk=forks[1]["id"])) is None
    assert queue_position(Run.objects.get(pk=forks[2]["id"])) == first
