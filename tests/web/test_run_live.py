"""The run page of a run still recording streams its events in (``web/_run_live.html``), over
the run stream the fork live view uses; a finished run's page opens no websocket. (The page
matrix's world only: a module's ``world`` fixture would flush it.)

``/forks/<primary>/`` leads to the run page, so for a primary run this is its only live view.
"""

from __future__ import annotations

import re

import pytest

from forklab.runs.models import Event, Run
from tests.web.conftest import admin, htmx, page
from tests.web.matrix import KINDS, STATUSES, MatrixWorld

pytestmark = pytest.mark.django_db

UNFINISHED = ("queued", "running", "paused")
CASES = [(kind, status) for kind in KINDS for status in STATUSES
         if not (kind == "primary" and status == "blocked")]  # only a fork's guard blocks


def stream_hook(html: str, run_id: str) -> re.Match[str] | None:
    """The page's websocket: the htmx ws extension connecting to the run's HTML stream."""
    return re.search(rf'hx-ext="ws" ws-connect="/ws/runs/{run_id}/\?after=(\d+)'
                     rf'&format=html&seen=(\w+)"', html)


@pytest.mark.parametrize(("kind", "status"), CASES)
def test_the_run_page_streams_only_while_the_run_is_recording(
        matrix: MatrixWorld, kind: str, status: str) -> None:
    run = Run.objects.get(pk=matrix.case(kind, status).run)
    html = page(admin(matrix).get(f"/runs/{run.id}/"))
    hook = stream_hook(html, run.id)
    if status in UNFINISHED:
        assert hook is not None, html[:400]
        # it connects after the last row it shows and tells the stream the status it shows
        assert hook.groups() == (str(run.last_seq), status)
        assert 'id="run-live"' in html and '<tbody id="live-events">' in html
        assert f'id="live-status" class="status status-{status}" data-status="{status}"' in html
    else:
        assert hook is None and 'hx-ext="ws"' not in html and "ws-connect" not in html
        assert 'id="run-live"' not in html and 'id="live-status"' not in html


@pytest.mark.parametrize("status", UNFINISHED)
def test_a_recording_runs_page_shows_its_last_events_once_each_in_seq_order(
        matrix: MatrixWorld, status: str) -> None:
    run = Run.objects.get(pk=matrix.case("primary", status).run)
    html = page(admin(matrix).get(f"/runs/{run.id}/"))
    tail = html.split('<tbody id="live-events">')[1].split("</tbody>")[0]
    shown = [int(seq) for seq in re.findall(r'<tr data-seq="(\d+)"', tail)]
    last = list(Event.objects.filter(run_id=run.id).order_by("-seq")
                .values_list("seq", flat=True)[:20])[::-1]
    assert shown == last  # the stream sends what comes after the last of them
    if status != "queued":
        assert shown  # a running or paused run has recorded events


def test_the_workspace_and_events_partials_of_a_recording_run_open_no_second_stream(
        matrix: MatrixWorld) -> None:
    run_id = matrix.case("primary", "running").run
    client = admin(matrix)
    for target in ("workspace", "events"):
        partial = page(client.get(f"/runs/{run_id}/", headers=htmx(target)))
        assert "ws-connect" not in partial and 'id="live-events"' not in partial


@pytest.mark.parametrize("status", UNFINISHED)
def test_a_share_link_to_a_recording_run_opens_no_stream(
        matrix: MatrixWorld, status: str) -> None:
    """A share reader has no account, and the stream needs one (SPEC §4.4)."""
    case = matrix.case("primary", status)
    html = page(admin(matrix).get(f"/s/{case.shares['run']}/"))
    assert stream_hook(html, case.run) is None and "ws-connect" not in html


@pytest.mark.parametrize("kind", ["primary", "fork"])
def test_a_status_frame_on_the_run_page_reloads_it(matrix: MatrixWorld, kind: str) -> None:
    """The stream's status frame asks the live view for ``#run-live``: the answer reloads
    the run page, which then shows the status (finished: no stream, the whole timeline)."""
    run_id = matrix.case(kind, "running").run
    response = admin(matrix).get(f"/forks/{run_id}/", headers=htmx("run-live"))
    assert response.status_code == 200 and response["HX-Refresh"] == "true"


def test_the_run_page_of_a_paused_fork_streams_and_keeps_its_watch_live_link(
        matrix: MatrixWorld) -> None:
    paused = matrix.case("fork", "paused").run
    html = page(admin(matrix).get(f"/runs/{paused}/"))
    assert stream_hook(html, paused) is not None
    assert f'href="/forks/{paused}/">Watch live</a>' in html
    done = matrix.case("fork", "completed").run
    finished = page(admin(matrix).get(f"/runs/{done}/"))
    assert stream_hook(finished, done) is None and "Watch live" not in finished
