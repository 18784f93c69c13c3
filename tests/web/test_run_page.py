"""The run page: access, the timeline's fork points, the inspector, events, partials."""

from __future__ import annotations

import re

import pytest

from tests.web.conftest import World, htmx, page

pytestmark = pytest.mark.django_db


def test_a_member_sees_the_timeline_with_a_marker_before_each_execution(world: World) -> None:
    run = world.runs["research-write"]
    response = world.client("bob").get(f"/runs/{run}/")
    assert response.status_code == 200
    html = page(response)
    markers = re.findall(r'data-point="(\d+)"(?: data-before="(\w+)")?', html)
    assert markers == [("1", "research"), ("6", "write"), ("11", "")]
    assert 'href="?at=6"' in html and 'hx-target="#workspace"' in html
    assert "Fork…" in html and "Sweep…" in html
    assert "Share read-only" not in html  # members do not manage shares


def test_runs_of_other_projects_and_unknown_runs_are_404_pages(world: World) -> None:
    for who, run in (("bob", world.other_run), ("eve", world.runs["research-write"]),
                     ("bob", "no-such-run")):
        response = world.client(who).get(f"/runs/{run}/")
        assert response.status_code == 404
        # the same answer whether the run exists elsewhere or not at all
        assert "Nothing here" in page(response) and f"no run &#x27;{run}&#x27;" in page(response)


def test_a_viewer_can_inspect_points_but_gets_no_fork_controls(world: World) -> None:
    html = page(world.client("vera").get(f"/runs/{world.runs['research-write']}/?at=6"))
    assert "State at seq 6" in html
    assert "Fork…" not in html and 'id="composer"' not in html and "Sweep…" not in html
    assert "forking it needs the member role" in html
    assert ">inspect before write · seq 6<" in html


def test_choosing_a_point_opens_the_composer_and_the_state_there(world: World) -> None:
    html = page(world.client("bob").get(f"/runs/{world.runs['research-write']}/?at=6"))
    assert 'id="composer"' in html and "before &#x27;write&#x27; execution 1" in html
    assert "You are a science writer." in html  # the prompt, pre-filled
    inspector = html.split('id="inspector"')[1].split("</section>")[0]
    assert "State at seq 6" in inspector and "notes" in inspector and "draft" not in inspector
    assert 'class="chip next">read next' in inspector


def test_htmx_asks_for_the_workspace_partial_only(world: World) -> None:
    response = world.client("bob").get(f"/runs/{world.runs['research-write']}/?at=6",
                                       headers=htmx("workspace"))
    html = page(response)
    assert '<div id="workspace"' in html and "<html" not in html
    assert 'id="composer"' in html and 'id="events"' not in html
    actions = html.split('id="run-actions" hx-swap-oob="true">')[1].split("</div>")[0]
    assert "fork/?at=6" in actions and "sweep/?at=6" in actions  # refreshed for the point


def test_the_event_table_filters_by_type_and_pages_in_sql(world: World,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from forklab.web.views import runs

    run = world.runs["review-loop"]
    client = world.client("bob")
    html = page(client.get(f"/runs/{run}/", {"type": "agent.responded"}, headers=htmx("events")))
    assert html.lstrip().startswith('<section id="events"')
    types = set(re.findall(r'data-type="([\w.]+)"', html))
    assert types == {"agent.responded"}
    monkeypatch.setattr(runs, "EVENTS_PER_PAGE", 5)
    second = page(client.get(f"/runs/{run}/", {"epage": 2}, headers=htmx("events")))
    assert re.findall(r'<tr data-seq="(\d+)"', second) == ["6", "7", "8", "9", "10"]
    at = page(client.get(f"/runs/{run}/", {"at": 12}))
    assert '<tr data-seq="12" data-type="node.started" class="selected">' in at


def test_a_seq_inside_a_node_is_inspected_with_a_warning(world: World) -> None:
    html = page(world.client("bob").get(f"/runs/{world.runs['research-write']}/?at=8"))
    assert "is inside a node, not a fork point" in html and 'id="composer"' not in html


def test_a_fork_shows_its_lineage_inherited_prefix_and_its_changes(world: World) -> None:
    html = page(world.client("bob").get(f"/runs/{world.fork}/"))
    base = world.runs["research-write"]
    assert f'href="/runs/{base}/"' in html and "base \u203a" in html  # the lineage breadcrumb
    assert "1 execution inherited from" in html
    assert "<code>prompt write</code>" in html
    assert f'href="/compare/{base}/{world.fork}/"' in html
    tree = html.split('id="lineage-h"')[1]
    assert world.fork[:8] in tree and "poem" in tree


def test_the_graph_picture_counts_executions_and_links_to_points(world: World) -> None:
    html = page(world.client("bob").get(f"/runs/{world.runs['review-loop']}/"))
    svg = html.split('<svg class="graphpic"')[1].split("</svg>")[0]
    assert re.search(r"<title>review · agent · \d+ executions?</title>", svg)
    assert 'class="edge loop"' in svg and 'href="?at=' in svg


def test_a_fork_that_has_not_started_still_has_a_page(world: World) -> None:
    from forklab.runs import forking
    from forklab.runs.specs import ForkSpec

    queued = forking.start_fork(user=world.users["bob"], spec=ForkSpec(
        base_run=world.runs["diamond"], at="start", label="waiting"))  # on_commit: never runs
    html = page(world.client("bob").get(f"/runs/{queued.run.id}/"))
    assert "No node has started yet." in html and "Watch live" in html
    live = page(world.client("bob").get(f"/forks/{queued.run.id}/"))
    assert "Queued" in live and "Cancel this fork" in live


@pytest.mark.parametrize(("at", "says"), [
    ("0", "at=0 is before this run&#x27;s first event: it has seq 1 to 12"),
    ("-1", "at=-1 is before this run&#x27;s first event: it has seq 1 to 12"),
    ("abc", "at=&#x27;abc&#x27; is not a seq number"),
    ("1.5", "at=&#x27;1.5&#x27; is not a seq number"),
    ("\u0661", "is not a seq number"),  # an Arabic-Indic 1: int() takes it, a link should not
])
def test_a_point_that_is_no_position_in_the_run_is_a_400_page_that_says_why(
        world: World, at: str, says: str) -> None:
    response = world.client("bob").get(f"/runs/{world.runs['research-write']}/", {"at": at})
    assert response.status_code == 400
    html = page(response)
    assert says in html and "This link is damaged" in html


def test_a_point_past_the_end_shows_the_end_with_a_notice(world: World) -> None:
    for at in ("13", "99999999999999999999"):
        response = world.client("bob").get(f"/runs/{world.runs['research-write']}/", {"at": at})
        assert response.status_code == 200
        assert "is past the end of this run: it has 12 events" in page(response)
