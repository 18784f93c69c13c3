"""Long runs stay legible: a recorded run of thousands of events, its timeline filtered by
node, kind, label, status and text, jumps to the first failure / first change / a seq,
folded iterations, compact mode, and every filter in the URL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from forklab.engine.fork import fork
from forklab.engine.graph import load_graph
from forklab.engine.recording import run_recorded
from forklab.engine.store import MemoryStore
from forklab.runs.engine_env import build_environment
from forklab.runs.models import Event, Membership, Project, Role, Run
from forklab.runs.store import DjangoStore
from forklab.web.timeline import OPEN_GROUPS, PAGE_SIZE
from tests.web.conftest import htmx, page

pytestmark = pytest.mark.django_db
FAIL_AT = 160


@dataclass
class Long:
    user: Any
    run: Run  # failed at count FAIL_AT, thousands of events
    fork: Run  # forked mid-run with the thinker's prompt changed; fails the same way

    def client(self) -> Client:
        client = Client()
        client.force_login(self.user)
        return client


@pytest.fixture(scope="module")
def long(django_db_setup: None, django_db_blocker: Any) -> Iterator[Long]:
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)
        project = Project.objects.create(slug="long", name="Long")
        user = get_user_model().objects.create_user("long-admin", password="pw")
        Membership.objects.create(user=user, project=project, role=Role.ADMIN)
        graph = load_graph(Path(__file__).with_name("long.yaml"))
        recorded = run_recorded(graph, {"counter": 0, "fail_at": FAIL_AT}, store=MemoryStore(),
                                env=build_environment())
        store = DjangoStore(project)
        store.save_graph(graph)
        store.append(recorded.run_id, recorded.store.read(recorded.run_id), expected_seq=0)
        run = Run.objects.get(pk=recorded.run_id)
        at = Event.objects.filter(run_id=run.id, type="node.started", node="think",
                                  iteration=FAIL_AT - 20).values_list("seq", flat=True)[0] - 1
        variant = fork(run.id, at={"sequence": at}, store=store, env=build_environment(),
                       change={"kind": "prompt", "target": "think",
                               "system_prompt": "Write two words about the count."},
                       budget={"max_live_calls": None, "max_cost_usd": None})
        built = Long(user=user, run=run, fork=Run.objects.get(pk=variant.run_id))
    yield built
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)


def workspace(long: Long, run: Run | None = None, **params: Any) -> str:
    run = run or long.run
    response = long.client().get(f"/runs/{run.id}/", params, headers=htmx("workspace"))
    assert response.status_code == 200
    return page(response)


def executions(html: str) -> list[tuple[str, int, str]]:
    return [(node, int(seq), status) for seq, node, status in re.findall(
        r'<li id="exec-(\d+)" class="exec[^"]*" data-node="(\w+)" data-seq="\d+" '
        r'data-status="(\w+)"', html)]


def test_the_long_run_has_thousands_of_events_and_a_paged_timeline(long: Long) -> None:
    assert long.run.status == "failed" and long.run.last_seq > 2000
    html = workspace(long)
    assert len(executions(html)) == PAGE_SIZE
    total = Event.objects.filter(run_id=long.run.id, type="node.started").count()
    assert f'<span class="muted">{total:,} node executions · page 1 of' in html


def test_filtering_to_one_node_keeps_only_its_executions_and_lives_in_the_url(
        long: Long) -> None:
    html = workspace(long, node="tick")
    shown = executions(html)
    assert shown and {node for node, _, _ in shown} == {"tick"}
    assert f"{FAIL_AT:,} of " in html  # tick ran FAIL_AT times
    later = re.search(r'href="(\?[^"]*tl=2[^"]*)"', html)
    assert later and "node=tick" in later.group(1)
    marker = re.search(r'class="fp[^"]*" data-point="\d+" data-before="tick">\s*<a href="([^"]+)"',
                       html)
    assert marker and "node=tick" in marker.group(1) and "at=" in marker.group(1)
    assert 'hx-push-url="true"' in html


def test_a_long_run_filtered_to_one_node_jumps_to_its_first_failure(long: Long) -> None:
    html = workspace(long, node="tick", jump="failed")
    jumped = re.search(r'<li id="exec-(\d+)" class="exec[^"]* jumped" data-node="tick"', html)
    assert jumped, "the failed tick is on the page and marked"
    failed = Event.objects.get(run_id=long.run.id, type="node.failed")
    started = Event.objects.filter(run_id=long.run.id, type="node.started", node="tick",
                                   seq__lt=failed.seq).order_by("-seq")[0]
    assert int(jumped.group(1)) == started.seq
    assert f"Fork at seq {started.seq - 1}" in html  # the point before it, composer open


@pytest.mark.parametrize(("params", "expected"), [
    ({"kind": "router"}, {"loop"}),
    ({"status": "failed"}, {"tick"}),
    ({"label": "live", "node": "think"}, {"think"}),
])
def test_kind_status_and_label_filters_keep_what_they_name(long: Long, params: dict[str, str],
                                                          expected: set[str]) -> None:
    shown = executions(workspace(long, **params))
    assert shown and {node for node, _, _ in shown} == expected
    if params.get("status") == "failed":
        assert [status for _, _, status in shown] == ["failed"]


def test_the_text_filter_finds_the_executions_whose_events_hold_it(long: Long) -> None:
    html = workspace(long, q="ledger is full")
    assert [(node, status) for node, _, status in executions(html)] == [("tick", "failed")]
    think = workspace(long, q="THINK", node="think")
    assert executions(think)  # node names match too, case-insensitively


def test_a_fork_jumps_to_its_first_changed_execution_and_filters_by_label(long: Long) -> None:
    html = workspace(long, run=long.fork, jump="changed")
    jumped = re.search(r'class="exec[^"]* jumped" data-node="(\w+)"', html)
    assert jumped and jumped.group(1) == "think"  # the node the change targets ran first
    labelled = {n for n, _, _ in executions(workspace(long, run=long.fork, label="reused"))}
    assert labelled <= {"think", "tick", "loop"}
    primary = workspace(long, jump="changed")
    assert "Nothing to jump to: no execution ran differently" in primary


def test_going_to_a_seq_opens_the_page_holding_it(long: Long) -> None:
    seq = Event.objects.filter(run_id=long.run.id, type="node.started",
                               iteration=100).values_list("seq", flat=True)[0] - 1
    html = workspace(long, at=seq)
    assert f'data-point="{seq}"' in html and f"State at seq {seq}" in html
    assert 'name="at" min="0"' in html


def test_iterations_fold_and_compact_bars_scale_to_what_is_shown(long: Long) -> None:
    html = workspace(long, node="tick", compact="1")
    groups = re.findall(r'<li class="itergroup"><details( open)?>', html)
    assert len(groups) > OPEN_GROUPS and groups.count(" open") == 1
    assert 'class="timeline compact"' in html
    lefts = [float(x) for x in re.findall(r'class="bar" style="left:([\d.]+)%', html)]
    assert min(lefts) == 0.0 and max(lefts) > 90  # the visible ticks span the track
    assert "tok</span>" not in html  # compact rows drop the figures


def test_nothing_matching_says_so_and_offers_to_clear(long: Long) -> None:
    html = workspace(long, node="think", status="failed")
    assert "No execution matches these filters" in html and "Clear them" in html
