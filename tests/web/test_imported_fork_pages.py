"""The dashboard offers forks of a run imported from a trace only where they work (SPEC §8):
an unmapped run forks before one replayable model call (its node markers only inspect, an
inspect-only turn offers no fork), a mapped run before one of its workflow's calls; the
workflow base a mapped fork forks says where it came from and is hidden from the runs list
by default."""

from __future__ import annotations

import dataclasses
import html as htmllib
import re
from typing import Any

import pytest

from forklab.runs import forking
from forklab.runs.imported_forks import workflow_base
from forklab.runs.models import Event, Run
from forklab.runs.specs import ForkSpec
from forklab.runs.traces import import_spans
from tests.traces.test_mapping import mixed_capture, workflow
from tests.web.conftest import HTMX, World, htmx, page

pytestmark = pytest.mark.django_db

SUPPORT = "forklab.demo_agents.support:support"


def _imported(world: World, spans: list[Any], trace: str) -> str:
    (run_id,) = import_spans(user=None, project=world.demo, unreadable=[], spans=[
        dataclasses.replace(s, trace_id=trace) for s in spans]).runs
    return str(run_id)


def _point(run: str, node: str) -> int:
    """The timeline boundary before ``node``'s first execution."""
    return Event.objects.get(run_id=run, type="node.started", node=node).seq - 1


def _text(response: Any) -> str:
    return htmllib.unescape(page(response))


def _points(html: str) -> list[tuple[str, str]]:
    """(call, forkable) of each entry of the run page's imported-forks list."""
    return re.findall(r'<li data-call="([^"]+)" data-forkable="(true|false)">', html)


@pytest.fixture
def settled(settings: Any) -> Any:
    settings.FORKLAB_TRACE_SETTLE_S = 0
    return settings


def test_an_unmapped_runs_markers_inspect_and_its_replayable_turns_fork(
        world: World, settled: Any) -> None:
    run = _imported(world, mixed_capture(), "2" * 32)
    client = world.client("bob")
    html = _text(client.get(f"/runs/{run}/"))
    assert 'data-imported-forks="one_call"' in html
    assert "forks of an imported run re-ask one model call" in html
    markers = re.findall(r'<span class="txt">(\w+) before', html)
    assert markers and set(markers) == {"inspect"}
    assert f'href="/runs/{run}/fork/"' not in html  # no node-level "Fork…"
    # the list: the captured turn forks, the one traced without content does not
    assert _points(html) == [("researcher#1/turn:1", "true"), ("researcher#1/turn:2", "false")]
    at = _point(run, "researcher")
    assert f'href="/runs/{run}/fork/?at={at}&call=researcher%231%2Fturn%3A1"' in html
    assert "inspect-only — missing: request messages, reply" in html
    # a node point shows the state there, never a composer a fork would refuse
    at_node = _text(client.get(f"/runs/{run}/?at={at}"))
    assert 'id="composer"' not in at_node and 'id="imported-forks"' in at_node


def test_an_inspect_only_turn_offers_no_fork_and_says_what_is_missing(
        world: World, settled: Any) -> None:
    run = _imported(world, mixed_capture(), "3" * 32)
    drawer = _text(world.client("bob").get(f"/runs/{run}/steps/researcher/1/",
                                           headers=htmx("drawer")))
    assert "data-imported-step" in drawer and "data-fork-step" not in drawer
    first, second = re.split(r'<li class="turn" ', drawer)[1:3]
    assert 'data-before-call="researcher#1/turn:1"' in first
    assert 'data-action="rerun"' in first
    assert "forkmark" not in second and 'data-action="rerun"' not in second
    assert 'data-inspect-only="researcher#1/turn:2"' in second
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in second


def test_the_composer_before_a_replayable_call_offers_its_changes_and_estimates(
        world: World, settled: Any) -> None:
    run = _imported(world, workflow(), "4" * 32)
    client = world.client("bob")
    key = "researcher#1/turn:2"
    at = _point(run, "researcher")
    html = _text(client.get(f"/runs/{run}/fork/", {"at": at, "call": key}))
    assert 'data-call-composer="one_call"' in html and f"Fork before <span class=\"mono\">{key}" in html
    for name in ("call-model", "call-provider", "call-temperature", "call-prompt",
                 "call-messages", "call-tools"):
        assert f'name="{name}"' in html, name
    assert '"content": "find x"' in html  # the recorded messages, to edit
    assert 'name="memory_set"' not in html and 'name="route"' not in html
    form = {"at": at, "at_call": key, "call-model": "scripted-small", "call-provider": "",
            "call-prompt": "", "call-temperature": "1.0", "max_live_calls": 5,
            "max_cost_usd": "1.00", "call-tools-shown": "1", "call-tools": ["lookup"]}
    messages = re.search(r'name="call-messages"[^>]*>([^<]*)</textarea>', html)
    assert messages is not None
    form["call-messages"] = messages.group(1)
    estimate = _text(client.post(f"/runs/{run}/fork/preflight/", form, headers=HTMX))
    assert '<dd id="preflight-calls">1</dd>' in estimate, estimate
    assert "model of 'researcher#1/turn:2' -> scripted-small" in estimate
    assert "Not ready" not in estimate
    # removing the tool it was offered is a change of that call too
    form["call-tools"] = []
    fewer = _text(client.post(f"/runs/{run}/fork/preflight/", form, headers=HTMX))
    assert "tools of 'researcher' (-lookup)" in fewer and "Not ready" not in fewer


def test_rerun_live_opens_the_call_composer_with_the_rerun_and_inspect_only_says_why(
        world: World, settled: Any) -> None:
    run = _imported(world, mixed_capture(), "9" * 32)
    client = world.client("bob")
    drawer = _text(client.get(f"/runs/{run}/steps/researcher/1/", headers=htmx("drawer")))
    (href,) = re.findall(r'<a class="btn small" href="([^"]+)" data-action="rerun"', drawer)
    composer = _text(client.get(href))
    assert 'data-call-composer="one_call"' in composer and "Opened from a fork link" in composer
    assert '"kind": "rerun"' in composer and 'data-inspect-only' not in composer
    inspect_only = _text(client.get(f"/runs/{run}/fork/", {"call": "researcher#1/turn:2"}))
    assert 'data-inspect-only="researcher#1/turn:2"' in inspect_only
    refused = _text(client.post(f"/runs/{run}/fork/preflight/", {
        "at_call": "researcher#1/turn:2", "max_live_calls": 5, "max_cost_usd": "1.00"},
        headers=HTMX))
    assert "Not ready" in refused and "is inspect-only" in refused


def test_the_composer_of_an_imported_run_without_a_call_lists_the_calls(
        world: World, settled: Any) -> None:
    run = _imported(world, mixed_capture(), "5" * 32)
    response = world.client("bob").get(f"/runs/{run}/fork/", {"at": _point(run, "researcher")})
    assert response.status_code == 422
    html = _text(response)
    assert "re-ask one model call" in html
    assert _points(html) == [("researcher#1/turn:1", "true"), ("researcher#1/turn:2", "false")]


def test_the_sweep_page_of_an_imported_run_says_how_to_sweep_one_call(
        world: World, settled: Any) -> None:
    """The sweep launcher varies node points, which an imported run does not fork at."""
    run = _imported(world, mixed_capture(), "6" * 32)
    for response in (world.client("bob").get(f"/runs/{run}/sweep/"),
                     world.client("bob").post(f"/runs/{run}/sweep/estimate/", {})):
        assert response.status_code == 422
        assert "forklab sweep RUN --at before:CALL" in _text(response)


def test_a_mapped_runs_page_offers_the_workflows_points(world: World, settled: Any) -> None:
    settled.FORKLAB_WORKFLOW_MAP = {"workflow": SUPPORT}
    run = _imported(world, workflow(), "6" * 32)
    client = world.client("bob")
    html = _text(client.get(f"/runs/{run}/"))
    assert 'data-imported-forks="workflow"' in html
    assert "forks re-execute it with the trace answering the prefix" in html
    assert f'data-workflow="{SUPPORT}"' in html and "maps <code>workflow</code>" in html
    points = _points(html)
    assert points and all(key.startswith("support#1/") for key, _ in points)
    assert ("support#1/openai:2", "true") in points
    assert f'href="/runs/{run}/fork/?call=support%231%2Fopenai%3A2"' in html
    assert set(re.findall(r'<span class="txt">(\w+) before', html)) == {"inspect"}
    # the conversation's markers fork before the workflow call the imported call became
    drawer = _text(client.get(f"/runs/{run}/steps/researcher/1/", headers=htmx("drawer")))
    assert "call=support%231%2Fopenai%3A2" in drawer
    assert 'data-action="rerun"' not in drawer
    # a node point posted anyway is refused here, not forked at a seq of another log
    refused = _text(client.post(f"/runs/{run}/fork/", {"at": _point(run, "researcher")},
                                headers=HTMX))
    assert "re-executes workflow" in refused and SUPPORT in refused
    assert not Run.objects.filter(parent_run__id__startswith="wf-").exists()
    # the composer before a workflow call names the workflow
    composer = _text(client.get(f"/runs/{run}/fork/", {"call": "support#1/openai:2"}))
    assert 'data-call-composer="workflow"' in composer
    assert f"Re-executes workflow <code>{SUPPORT}" in composer
    assert 'name="input_patch"' in composer and 'name="call-tools"' not in composer
    # the trace recorded no arguments: the estimate says so until they are given
    form = {"at_call": "support#1/openai:2", "call-model": "gpt-4.1", "max_live_calls": 5,
            "max_cost_usd": "1.00"}
    missing = _text(client.post(f"/runs/{run}/fork/preflight/", form, headers=HTMX))
    assert "Not ready" in missing and "takes arguments" in missing
    given = _text(client.post(f"/runs/{run}/fork/preflight/",
                              {**form, "input_patch": '{"ticket": "Order A-1001"}'},
                              headers=HTMX))
    assert "Not ready" not in given and 'id="preflight-calls"' in given
    assert "model of 'support#1/openai:2' -> gpt-4.1" in given


def test_the_workflow_base_names_its_imported_run_and_is_hidden_by_default(
        world: World, settled: Any) -> None:
    settled.FORKLAB_WORKFLOW_MAP = {"workflow": SUPPORT}
    run = _imported(world, workflow(), "7" * 32)
    ticket = [{"kind": "input_patch", "patch": {"ticket": "Order A-1001"}}]
    base = workflow_base(Run.objects.get(pk=run), changes=ticket)
    assert base.id.startswith("wf-")
    client = world.client("bob")
    html = _text(client.get(f"/runs/{base.id}/"))
    assert f'data-workflow-base="{base.id}" data-imported-run="{run}"' in html
    assert "The frozen workflow recording of imported run" in html
    assert f'<a class="mono" href="/runs/{run}/">' in html
    fork = forking.start_fork(user=world.users["demo"], spec=ForkSpec(
        base_run=run, at="start", changes=ticket, policy={"memoize": True}))
    assert fork.run.parent_run_id == base.id
    shown = _text(client.get(f"/runs/{fork.run.id}/"))
    assert "Lineage: fork of workflow base" in shown
    assert f'href="/runs/{base.id}/"' in shown and f'href="/runs/{run}/"' in shown
    listed = _text(client.get("/", {"project": "demo"}))
    assert f'id="run-{run}"' in listed and f'id="run-{base.id}"' not in listed
    assert f'id="run-{fork.run.id}"' in listed
    with_bases = _text(client.get("/", {"project": "demo", "bases": "1"}))
    assert f'id="run-{base.id}"' in with_bases
    searched = _text(client.get("/", {"project": "demo", "q": base.id[:10]}))
    assert f'id="run-{base.id}"' in searched
    # the API lists every run, bases included (a contract, SPEC §4.3)
    api = client.get("/api/v1/runs/", {"project": "demo", "limit": 200}).json()
    assert base.id in {r["id"] for r in api["results"]}
