"""The live fork view (panel states, cancel, answer) and the diff page."""

from __future__ import annotations

import re

import pytest
from django.template.loader import render_to_string

from forklab.runs.models import Run
from forklab.web.diffview import Fold, fold_steps
from tests.web.conftest import HTMX, World, htmx, page, step

pytestmark = pytest.mark.django_db


def test_the_live_view_connects_after_the_last_event_it_rendered(world: World) -> None:
    run = world.run(world.paused_fork)
    html = page(world.client("bob").get(f"/forks/{run.id}/"))
    assert (f'ws-connect="/ws/runs/{run.id}/?after={run.last_seq}&format=html'
            f'&seen={run.status}"') in html
    assert 'hx-ext="ws"' in html
    assert re.findall(r'<tr data-seq="(\d+)"', html) == [str(s) for s in
                                                         range(1, run.last_seq + 1)]
    panel = html.split('id="fork-panel"')[1]
    assert "Waiting at an approval gate" in panel and "Release the order" in panel
    assert 'value="approved"' in panel and 'value="rejected"' in panel


def test_a_viewer_watches_but_cannot_answer_or_cancel(world: World) -> None:
    html = page(world.client("vera").get(f"/forks/{world.paused_fork}/"))
    assert "A project member can answer it." in html and 'value="approved"' not in html
    assert world.client("eve").get(f"/forks/{world.paused_fork}/").status_code == 404


def test_the_fork_view_of_a_run_that_is_no_fork_leads_to_its_run_page(world: World) -> None:
    primary = world.runs["research-write"]
    client = world.client("bob")
    assert client.get(f"/api/v1/forks/{primary}/").status_code == 404  # not a fork there
    response = client.get(f"/forks/{primary}/")
    assert response.status_code == 302 and response["Location"] == f"/runs/{primary}/"
    panel = client.get(f"/forks/{primary}/", headers=htmx("fork-panel"))
    assert panel["HX-Redirect"] == f"/runs/{primary}/"
    assert world.client("eve").get(f"/forks/{primary}/").status_code == 404  # not readable


def test_a_reader_of_another_project_cannot_ask_for_a_run_pages_reload(world: World) -> None:
    """The run page's status frames ask the live view for ``#run-live`` (tests/web/
    test_run_live.py); that answer, too, is for readers of the run only."""
    run_id = world.runs["research-write"]
    assert world.client("eve").get(f"/forks/{run_id}/", headers=htmx("run-live")
                                   ).status_code == 404
    assert world.client("bob").get(f"/forks/{run_id}/", headers=htmx("run-live")
                                   )["HX-Refresh"] == "true"


def test_the_panel_of_a_finished_fork_turns_the_page_into_its_diff(world: World) -> None:
    response = world.client("bob").get(f"/forks/{world.fork}/", headers=htmx("fork-panel"))
    base = world.runs["research-write"]
    assert response["HX-Redirect"] == f"/compare/{base}/{world.fork}/"
    full = page(world.client("bob").get(f"/forks/{world.fork}/"))
    assert "Finished: completed" in full and f'href="/compare/{base}/{world.fork}/"' in full
    sums = dict(re.findall(r'<dd data-sum="(\w+)">([^<]*)</dd>', full))
    assert sums["nodes"] == "1" and sums["calls"] == "1" and sums["incurred"].startswith("$0.0")
    assert re.search(r'data-type="agent.responded" data-tokens="\d+" data-cost="[\d.e-]+" '
                     r'data-label="changed"', full)  # the targeted node: never "live"


def test_the_stream_template_appends_rows_and_asks_for_the_panel_on_status(world: World
                                                                           ) -> None:
    row = render_to_string("web/stream/event.html", {"run_id": "r1", "event": {
        "seq": 9, "type": "agent.responded", "node": "write", "occurrence": 1, "iteration": 1,
        "at": "2026-01-01T10:00:00.123456+00:00", "payload": {
            "model": "scripted-large", "input_tokens": 10, "output_tokens": 20,
            "cost_usd": 0.0021, "label": "live", "text": "hello"}}})
    assert row.startswith('<tbody hx-swap-oob="beforeend:#live-events">')
    assert '<tr data-seq="9" data-type="agent.responded" data-tokens="30" data-cost="0.0021"' in row
    assert "10+20 tok" in row and "$0.0021" in row and 'class="label label-live"' in row
    status = render_to_string("web/stream/event.html", {"run_id": "r1", "status": "paused",
                                                        "last_seq": 9})
    assert 'id="live-status" hx-swap-oob="true"' in status and 'data-status="paused"' in status
    # the panel of the page it lands on: the fork live view's, or the run page's live section
    assert 'hx-get="/forks/r1/" hx-trigger="load" hx-target="#fork-panel, #run-live"' in status


def test_answering_with_bad_json_explains_itself_in_the_panel(world: World) -> None:
    response = world.client("bob").post(f"/forks/{world.paused_fork}/answer/",
                                        {"decision": "edited", "data": "{nope"}, headers=HTMX)
    assert response.status_code == 422 and "not valid JSON" in page(response)
    assert world.run(world.paused_fork).status == "paused"


def test_answering_with_a_key_the_gate_does_not_declare_is_refused_and_stores_nothing(
        world: World) -> None:
    html = page(world.client("bob").get(f"/forks/{world.paused_fork}/"))
    assert "This gate lets an answer set no memory keys" in html
    before = world.run(world.paused_fork)
    response = world.client("bob").post(f"/forks/{world.paused_fork}/answer/", {
        "decision": "edited", "memory_updates": '{"email": "eve@example.com"}'}, headers=HTMX)
    assert response.status_code == 422
    assert ("memory_updates.email is not declared: leave it out, or declare it in the "
            "gate&#x27;s &#x27;writes&#x27;") in page(response)
    after = world.run(world.paused_fork)
    assert (after.status, after.work, after.last_seq) == ("paused", before.work, before.last_seq)


def test_answering_a_fork_that_is_not_paused_is_refused_next_to_the_buttons(world: World
                                                                           ) -> None:
    response = world.client("bob").post(f"/forks/{world.fork}/answer/",
                                        {"decision": "approved"}, headers=HTMX)
    assert response.status_code == 422 and "not paused at an approval gate" in page(response)


def test_cancelling_a_paused_fork_records_the_cancellation(world: World) -> None:
    assert world.client("vera").post(f"/forks/{world.paused_fork}/cancel/").status_code == 403
    response = world.client("bob").post(f"/forks/{world.paused_fork}/cancel/")
    assert response.status_code == 302 and response["Location"] == f"/forks/{world.paused_fork}/"
    assert world.run(world.paused_fork).status == "cancelled"


def test_the_diff_page_shows_paths_memory_cost_calls_and_explain(world: World) -> None:
    base = world.runs["research-write"]
    html = page(world.client("bob").get(f"/compare/{base}/{world.fork}/"))
    assert re.search(r'class="step op-changed divergence"[^>]*>write@fork</a>', html)
    assert '<tr class="op-changed">' in html and '<tr class="op-same">' in html
    draft = html.split('id="key-draft"')[1].split("</article>")[0]
    assert "<del>" in draft and "<ins>" in draft and "% alike" in draft
    assert "Incurred by the tail" in html and 'class="label label-changed"' in html
    assert re.search(r'<pre class="explain" id="explain">fork \w+ of \w+ at seq 6 \(before '
                     r"&#x27;write&#x27; execution 1, iteration 1\)", html)
    assert 'data-copy-from="explain"' in html


def test_the_diff_page_is_404_outside_ones_projects(world: World) -> None:
    base = world.runs["research-write"]
    assert world.client("eve").get(f"/compare/{base}/{world.fork}/").status_code == 404
    assert world.client("bob").get(f"/compare/{base}/{world.other_run}/").status_code == 404


def test_the_path_partial_pages_long_paths_with_unchanged_stretches_folded() -> None:
    same, changed = step("same", "a"), step("changed", "b")
    folded = fold_steps([same] * 100 + [changed] + [same] * 100)
    assert [r.fold if isinstance(r, Fold) else r.op for r in folded.rows] == [
        98, "same", "same", "changed", "same", "same", 98]
    long = fold_steps([changed] * 700, start=120)
    assert len(long.rows) == 120 and long.next == 240 and long.prev == 0


def test_the_compare_page_answers_htmx_path_pages_with_the_table_only(world: World) -> None:
    base = world.runs["research-write"]
    html = page(world.client("bob").get(f"/compare/{base}/{world.fork}/", headers=htmx("path")))
    assert html.lstrip().startswith('<div id="path"') and "<html" not in html


def test_forks_of_a_run_can_be_compared_with_each_other(world: World) -> None:
    variants = list(Run.objects.filter(fork_group_id=world.sweep).order_by("label"))
    html = page(world.client("bob").get(f"/compare/{variants[0].id}/{variants[1].id}/"))
    assert "compared with" in html and "What became different" in html
