"""One read model (``forklab.runs.readmodel``): a finished 10,000-event fork is read by the
API and the dashboard from one cached view — no event log read, and a run that changes
status is read again."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils.html import escape

from forklab.engine.fork import fork
from forklab.engine.graph import parse_graph
from forklab.engine.recording import run_recorded
from forklab.engine.store import MemoryStore
from forklab.runs import readmodel
from forklab.runs.engine_env import build_environment
from forklab.runs.models import Event, Membership, Project, Role, Run, RunStatus
from forklab.runs.projections import ForkResultProjection
from forklab.runs.store import DjangoStore
from tests.api.conftest import API

pytestmark = pytest.mark.django_db
ITERATIONS = 840  # about 12 events an iteration: a run of just over 10,000 events
LONG_YAML = Path(__file__).parents[1] / "web" / "long.yaml"


@dataclass
class Long:
    user: Any
    base: Run
    fork: Run  # a finished null fork at start, its tail run again: 10,000+ events of its own

    def client(self) -> Client:
        client = Client()
        client.force_login(self.user)
        return client


def _loop_graph() -> Any:
    spec = yaml.safe_load(LONG_YAML.read_text())
    spec["max_iterations"] = ITERATIONS
    router = next(n for n in spec["nodes"] if n["id"] == "loop")
    router["rules"][0]["when"][0]["value"] = ITERATIONS
    return parse_graph(spec)


@pytest.fixture(scope="module")
def long(django_db_setup: None, django_db_blocker: Any) -> Iterator[Long]:
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)
        project = Project.objects.create(slug="long-read", name="Long read")
        user = get_user_model().objects.create_user("long-reader", password="pw")
        Membership.objects.create(user=user, project=project, role=Role.MEMBER)
        graph = _loop_graph()
        env = build_environment()
        recorded = run_recorded(graph, {"counter": 0}, store=MemoryStore(), env=env)
        store = DjangoStore(project)
        store.save_graph(graph)
        store.append(recorded.run_id, recorded.store.read(recorded.run_id), expected_seq=0)
        variant = fork(recorded.run_id, at="start", policy={"memoize": False}, store=store,
                       env=env, ignore_budget=True, label="null fork")
        ForkResultProjection.after_run(variant.run_id, DjangoStore)  # as its worker leaves it
        built = Long(user=user, base=Run.objects.get(pk=recorded.run_id),
                     fork=Run.objects.get(pk=variant.run_id))
    yield built
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)


def _event_queries(queries: CaptureQueriesContext) -> list[str]:
    table = Event._meta.db_table
    return [q["sql"] for q in queries.captured_queries if table in q["sql"]]


def test_reading_a_finished_10k_event_fork_reads_no_event_log(long: Long) -> None:
    assert long.fork.status == RunStatus.COMPLETED and long.fork.last_seq >= 10_000
    client = long.client()
    readmodel.forget()  # cold: this process has read nothing of it
    with CaptureQueriesContext(connection) as cold:
        first = client.get(f"{API}/forks/{long.fork.id}/")
    with CaptureQueriesContext(connection) as warm:
        again = client.get(f"{API}/forks/{long.fork.id}/")
    assert first.status_code == again.status_code == 200
    assert _event_queries(cold) == _event_queries(warm) == []
    body = first.json()
    assert again.json() == body
    assert body["state"] == "complete" and len(body["path"]) > 2 * ITERATIONS
    assert len(body["diff"]["path"]["aligned"]) == len(body["path"])
    assert {c["label"] for c in body["calls"]} == {"live"}  # run again, nothing served
    # warm: the view is kept, so only the fork's row (the access check) is read
    assert len(warm.captured_queries) < len(cold.captured_queries)


def test_the_api_and_the_dashboard_show_one_view_of_the_fork(long: Long) -> None:
    client = long.client()
    fork_body = client.get(f"{API}/forks/{long.fork.id}/").json()
    run_body = client.get(f"{API}/runs/{long.fork.id}/").json()
    assert {k: fork_body[k] for k in run_body} == run_body
    with CaptureQueriesContext(connection) as queries:
        page = client.get(f"/compare/{long.base.id}/{long.fork.id}/")
    assert page.status_code == 200
    html = page.content.decode()
    # the diff page's explain() block is the API's, and its header names the fork point
    # from the same stored result: the point is not read from the run.forked event
    assert escape(fork_body["explain"].splitlines()[0]) in html
    assert "before &#x27;think&#x27; execution 1" in html
    assert not [sql for sql in _event_queries(queries) if '"point"' in sql]


def test_a_run_that_changes_status_is_read_again(long: Long) -> None:
    run = Run.objects.select_related("project").get(pk=long.fork.id)
    finished = readmodel.view(run)
    assert readmodel.view(run) is finished and finished.cached
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    try:
        running = Run.objects.select_related("project").get(pk=run.pk)
        going = readmodel.view(running)
        assert not going.cached and readmodel.view(running) is not going
        assert going.fork is not None
        assert (going.fork.state, going.fork.result) == ("running", None)
        body = long.client().get(f"{API}/forks/{run.pk}/").json()
        assert (body["state"], body["diff"]) == ("running", None)
    finally:
        Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    done = readmodel.view(Run.objects.select_related("project").get(pk=run.pk))
    assert done.run_json == finished.run_json and done.fork == finished.fork


def test_a_result_stored_before_it_kept_its_point_is_served_as_stored(long: Long) -> None:
    """A row an older version stored has no ``point``: it is served (its base may be gone,
    so it is not rebuilt) and the dashboard reads the point from the fork's event."""
    from forklab.runs.models import ForkResult

    row = ForkResult.objects.get(run_id=long.fork.id)
    original = dict(row.result)
    older = {k: v for k, v in original.items() if k != "point"}
    ForkResult.objects.filter(pk=row.pk).update(result=older)
    readmodel.forget()
    try:
        body = long.client().get(f"{API}/forks/{long.fork.id}/").json()
        assert body["diff"] is not None and body["explain"] == original["explain"]
        assert "point" not in ForkResult.objects.get(pk=row.pk).result  # not rebuilt
        forked = readmodel.forked(Run.objects.select_related("project").get(pk=long.fork.id))
        assert forked is not None and forked.label == original["point"]["label"]
    finally:
        ForkResult.objects.filter(pk=row.pk).update(result=original)
        readmodel.forget()
