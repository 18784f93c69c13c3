"""Never a 500: every page renders for runs in every status, for primary runs, forks and forks
of forks, and the runs between them carry every provenance label (``tests/web/matrix.py``).

A page that raises on one combination fails here; the test client re-raises view errors, so
a traceback cannot hide behind a status code.
"""

from __future__ import annotations

import pytest
from django.test import Client

from forklab.runs.models import Run
from tests.web.conftest import admin, htmx, page
from tests.web.matrix import (
    KINDS,
    LABELS,
    STATUSES,
    Case,
    MatrixWorld,
    labels_recorded,
    statuses,
)

pytestmark = pytest.mark.django_db

UNFINISHED = ("queued", "running", "paused")
CASES = [(kind, status) for kind in KINDS for status in STATUSES
         if not (kind == "primary" and status == "blocked")]  # only a fork's guard blocks


def first_point(run: Run) -> int:
    from forklab.web import timeline

    points = timeline.build(run).points
    return points[0] if points else 0


def test_the_matrix_holds_every_status_of_every_kind(matrix: MatrixWorld) -> None:
    found = statuses(matrix)
    assert found == {f"{kind}-{status}": status for kind, status in CASES}


def test_the_matrix_runs_carry_every_provenance_label(matrix: MatrixWorld) -> None:
    runs = [case.run for case in matrix.cases.values()] + [matrix.memo_fork]
    assert labels_recorded(runs) >= set(LABELS)


@pytest.mark.parametrize(("kind", "status"), CASES)
def test_run_page_state_panel_and_timeline_render(matrix: MatrixWorld, kind: str,
                                                 status: str) -> None:
    case = matrix.case(kind, status)
    run = Run.objects.get(pk=case.run)
    client = admin(matrix)
    assert client.get(f"/runs/{run.id}/").status_code == 200
    point = first_point(run)
    for at in (point, point + 1, run.last_seq, run.last_seq + 5):
        response = client.get(f"/runs/{run.id}/", {"at": at}, headers=htmx("workspace"))
        assert response.status_code == 200, (at, page(response)[:400])
    events = client.get(f"/runs/{run.id}/", {"type": "node.started"}, headers=htmx("events"))
    assert events.status_code == 200
    for filters in ({"node": "fetch", "jump": "failed"}, {"label": "reused", "compact": "1"},
                    {"status": "blocked", "q": "stock", "jump": "changed"}):
        response = client.get(f"/runs/{run.id}/", filters, headers=htmx("workspace"))
        assert response.status_code == 200, (filters, page(response)[:400])


@pytest.mark.parametrize(("kind", "status"), CASES)
def test_the_composer_opens_on_a_finished_run_and_explains_an_unfinished_one(
        matrix: MatrixWorld, kind: str, status: str) -> None:
    run = Run.objects.get(pk=matrix.case(kind, status).run)
    response = admin(matrix).get(f"/runs/{run.id}/fork/", {"at": first_point(run)})
    if status in UNFINISHED:
        assert response.status_code == 409
        assert "has not finished" in page(response)
    else:
        assert response.status_code == 200, page(response)[:400]
        assert 'id="composer"' in page(response)


@pytest.mark.parametrize(("kind", "status"), CASES)
def test_live_page_and_its_panel_render(matrix: MatrixWorld, kind: str, status: str) -> None:
    run_id = matrix.case(kind, status).run
    client = admin(matrix)
    full = client.get(f"/forks/{run_id}/")
    panel = client.get(f"/forks/{run_id}/", headers=htmx("fork-panel"))
    if kind == "primary":  # no fork: its page is the run page (the API's fork is a 404)
        assert full.status_code == 302 and full["Location"] == f"/runs/{run_id}/"
        assert panel["HX-Redirect"] == f"/runs/{run_id}/"
        return
    assert full.status_code == 200
    assert panel.status_code == 200


@pytest.mark.parametrize(("kind", "status"), CASES)
def test_the_diff_against_its_base_renders(matrix: MatrixWorld, kind: str, status: str) -> None:
    case = matrix.case(kind, status)
    response = admin(matrix).get(f"/compare/{case.compare_to}/{case.run}/")
    assert response.status_code == 200, page(response)[:400]
    assert "What became different" in page(response)


@pytest.mark.parametrize("group", ["fork", "fork_of_fork", "queued"])
def test_sweep_pages_render_variants_in_every_status(matrix: MatrixWorld, group: str) -> None:
    response = admin(matrix).get(f"/sweeps/{matrix.groups[group]}/")
    assert response.status_code == 200
    html = page(response)
    wanted = ("queued",) if group == "queued" else \
        ("completed", "failed", "blocked", "paused", "cancelled", "running")
    for status in wanted:
        assert f'data-status="{status}"' in html


@pytest.mark.parametrize(("kind", "status"), CASES)
@pytest.mark.parametrize("share", ["run", "point", "diff"])
def test_share_pages_render_for_an_anonymous_reader(matrix: MatrixWorld, kind: str,
                                                   status: str, share: str) -> None:
    case: Case = matrix.case(kind, status)
    response = Client().get(f"/s/{case.shares[share]}/")
    assert response.status_code == 200, page(response)[:400]
    assert "Read-only shared view" in page(response)


@pytest.mark.parametrize(("kind", "status"), CASES)
def test_step_drawers_render_for_every_execution(matrix: MatrixWorld, kind: str,
                                                 status: str) -> None:
    case = matrix.case(kind, status)
    run = Run.objects.get(pk=case.run)
    client = admin(matrix)
    for entry in run.path or []:
        url = f"/runs/{run.id}/steps/{entry['node']}/{entry['occurrence']}/"
        response = client.get(url, headers=htmx("drawer"))
        assert response.status_code == 200, (url, page(response)[:300])
        shared = Client().get(f"/s/{case.shares['run']}/runs/{run.id}/steps/"
                              f"{entry['node']}/{entry['occurrence']}/")
        assert shared.status_code == 200
    if run.last_seq:
        base = Run.objects.get(pk=case.compare_to)
        aligned = max(len(base.path or []), len(run.path or []))
        for index in range(aligned):
            url = f"/compare/{base.id}/{run.id}/steps/{index}/"
            response = client.get(url)
            if response.status_code == 404:  # a shorter alignment ends before max(len)
                assert "the diff has no step" in page(response)
                break
            assert response.status_code == 200, (url, page(response)[:300])
