"""The runs list: project scoping, filters, search, pages, fork counts, the htmx table."""

from __future__ import annotations

import pytest

from tests.web.conftest import World, htmx, page

pytestmark = pytest.mark.django_db


def test_the_runs_list_shows_the_projects_runs_with_fork_counts_and_hides_others(
        world: World) -> None:
    html = page(world.client("bob").get("/"))
    assert f'id="run-{world.runs["research-write"]}"' in html
    assert f'id="run-{world.fork}"' in html
    assert world.other_run not in html
    row = html.split(f'id="run-{world.runs["research-write"]}"')[1].split("</tr>")[0]
    assert '<span class="forks-count ">3</span>' in row  # the prompt fork and two variants


def test_filters_and_label_search_narrow_the_list(world: World) -> None:
    client = world.client("bob")
    forks = page(client.get("/", {"kind": "counterfactual"}))
    assert f'id="run-{world.fork}"' in forks and f'id="run-{world.runs["diamond"]}"' not in forks
    paused = page(client.get("/", {"status": "paused"}))
    assert f'id="run-{world.paused_fork}"' in paused and f'id="run-{world.fork}"' not in paused
    graph = page(client.get("/", {"graph": "diamond"}))
    assert graph.count('id="run-') == 1
    labelled = page(client.get("/", {"q": "poe"}))
    assert labelled.count('id="run-') == 1 and f'id="run-{world.fork}"' in labelled
    assert "No run matches these filters" in page(client.get("/", {"q": "nothing-like-it"}))


def test_an_unknown_filter_value_is_explained_not_a_server_error(world: World) -> None:
    response = world.client("bob").get("/", {"status": "exploded"})
    assert response.status_code == 200
    assert "unknown status &#x27;exploded&#x27;" in page(response)


def test_the_list_pages_fifty_runs_at_a_time(world: World, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    from forklab.web.views import home

    monkeypatch.setattr(home, "PER_PAGE", 3)
    first = page(world.client("bob").get("/"))
    assert first.count('id="run-') == 3 and "Older →" in first
    second = page(world.client("bob").get("/", {"page": 2}))
    assert second.count('id="run-') == 3 and "← Newer" in second


def test_an_htmx_filter_request_gets_the_table_only(world: World) -> None:
    response = world.client("bob").get("/", {"kind": "primary"}, headers=htmx("runs-table"))
    html = page(response)
    assert html.lstrip().startswith('<section id="runs-table"') and "<html" not in html


def test_the_project_switcher_remembers_the_choice(world: World) -> None:
    client = world.client("eve")
    assert world.runs["diamond"] not in page(client.get("/"))
    demo_admin = world.client("demo")
    response = demo_admin.get("/projects/switch/", {"project": "demo"})
    assert response.status_code == 302 and response["Location"] == "/?project=demo"
    assert 'value="demo" selected' in page(demo_admin.get("/"))
    demo_admin.get("/projects/switch/", {"project": "other"})  # not theirs: all projects
    assert '<option value="">All projects</option>' in page(demo_admin.get("/"))


def test_anonymous_visitors_are_sent_to_log_in(world: World) -> None:
    for path in ("/", f"/runs/{world.fork}/", f"/forks/{world.fork}/", "/shares/",
                 f"/compare/{world.runs['research-write']}/{world.fork}/"):
        response = world.client(None).get(path)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
