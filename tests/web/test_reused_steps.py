"""A fork's served nodes (one ``node.reused`` event each) read like executed ones: a timeline
bar with its calls, labels and memo mark, a step drawer with the served reply, a row in the
event table and the live tail, an entry in the API's events list."""

from __future__ import annotations

import html as htmllib

import pytest

from forklab.runs.models import Event, Run
from forklab.web import timeline
from forklab.web.views.live import tail_summary
from tests.web.conftest import admin, htmx, page
from tests.web.matrix import MatrixWorld

pytestmark = pytest.mark.django_db


def served(run_id: str) -> list[Event]:
    return list(Event.objects.filter(run_id=run_id, type="node.reused").order_by("seq"))


def test_the_memo_fork_serves_its_unchanged_nodes_as_one_event_each(
        matrix: MatrixWorld) -> None:
    events = served(matrix.memo_fork)
    assert events, "the memoized fork served nothing"
    assert not Event.objects.filter(run_id=matrix.memo_fork, type="node.completed",
                                    payload__memo=True).exists()
    run = Run.objects.get(pk=matrix.memo_fork)
    bars = {(b.node, b.occurrence): b for b in timeline.build(run).all_bars}
    for event in events:
        bar = bars[(event.node, event.occurrence)]
        assert (bar.start_seq, bar.end_seq, bar.status) == (event.seq, event.seq, "completed")
        assert bar.memo and "reused" in bar.labels


def test_the_timeline_details_count_a_served_nodes_calls(matrix: MatrixWorld) -> None:
    run = Run.objects.get(pk=matrix.memo_fork)
    event = next(e for e in served(run.id)
                 if any(a["type"] == "agent_result" for a in e.payload["actions"]))
    shown = timeline.build(run, at=event.seq)
    bar = next(b for b in shown.bars if b.start_seq == event.seq)
    answers = [a for a in event.payload["actions"] if a["type"] == "agent_result"]
    assert bar.tokens == sum(a["input_tokens"] + a["output_tokens"] for a in answers)
    assert bar.labels.count("reused") >= len(answers) and bar.memo


def test_a_served_steps_drawer_shows_the_reply_it_was_served(matrix: MatrixWorld) -> None:
    event = next(e for e in served(matrix.memo_fork)
                 if any(a["type"] == "agent_result" for a in e.payload["actions"]))
    reply = next(a for a in event.payload["actions"] if a["type"] == "agent_result")
    response = admin(matrix).get(f"/runs/{matrix.memo_fork}/steps/{event.node}/"
                                 f"{event.occurrence}/", headers=htmx("drawer"))
    assert response.status_code == 200
    body = htmllib.unescape(page(response))
    assert reply["text"] in body
    assert "served by memoization" in body  # the memo reason, as for the multi-event form


def test_the_event_table_and_the_live_tail_show_a_served_node(matrix: MatrixWorld) -> None:
    run_id = matrix.memo_fork
    client = admin(matrix)
    response = client.get(f"/runs/{run_id}/", {"type": "node.reused"}, headers=htmx("events"))
    assert response.status_code == 200
    assert "served from the recording" in page(response)
    rows = [{"type": e.type, "seq": e.seq, "node": e.node, "payload": e.payload}
            for e in Event.objects.filter(run_id=run_id).order_by("seq")]
    summary = tail_summary(rows)
    completed = sum(1 for r in rows if r["type"] in ("node.completed", "node.reused"))
    assert summary["nodes"] == completed
    assert summary["calls"] == sum(1 for r in rows if r["type"] == "agent.responded") + sum(
        1 for r in rows if r["type"] == "node.reused"
        for a in r["payload"]["actions"] if a["type"] == "agent_result")


def test_the_api_lists_a_served_node_as_stored(matrix: MatrixWorld) -> None:
    event = served(matrix.memo_fork)[0]
    response = admin(matrix).get(f"/api/v1/runs/{matrix.memo_fork}/events/",
                                 {"type": "node.reused"})
    assert response.status_code == 200, response.content[:300]
    body = response.json()
    listed = body["results"] if isinstance(body, dict) and "results" in body else body
    assert any(e["seq"] == event.seq and e["type"] == "node.reused" for e in listed)


def test_the_memo_and_reused_filters_keep_served_nodes(matrix: MatrixWorld) -> None:
    from forklab.web.timeline_filters import Filters, load_labels, select

    run = Run.objects.get(pk=matrix.memo_fork)
    bars = timeline.executions(run.id)
    load_labels(run.id, bars)
    served_at = {e.seq for e in served(run.id)}
    for label in ("memo", "reused"):
        kept = {b.start_seq for b in select(run.id, bars, Filters(label=label))}
        assert served_at <= kept, label
