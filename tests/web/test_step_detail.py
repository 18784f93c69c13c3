"""The step drawer: what a node was sent and what came back, in full, with its label's reason;
and the diff's aligned step side by side with word-level highlighting."""

from __future__ import annotations

import html as htmllib
import re

import pytest
from django.test import Client

from forklab.runs import sharing
from forklab.runs.models import Event
from forklab.web.steps import LONG_CHARS, Context, build
from tests.web.conftest import World, htmx, page

pytestmark = pytest.mark.django_db


def payload(run_id: str, type_: str, node: str) -> dict:
    return Event.objects.filter(run_id=run_id, type=type_, node=node).order_by("seq") \
        .values_list("payload", flat=True)[0]


def text(response: object) -> str:
    return htmllib.unescape(page(response))


def test_an_agent_step_shows_the_whole_request_and_the_whole_reply(world: World) -> None:
    run = world.runs["research-write"]
    response = world.client("bob").get(f"/runs/{run}/steps/write/1/")
    assert response.status_code == 200
    body = text(response)
    request = payload(run, "agent.requested", "write")
    reply = payload(run, "agent.responded", "write")
    assert request["system_prompt"] in body
    assert request["messages"][0]["content"] in body  # the rendered prompt, notes and all
    assert len(reply["text"]) > 160 and reply["text"] in body  # no 160-character cut
    assert "scripted/scripted-large" in body and "temperature" in body
    assert f"{reply['input_tokens']} in + {reply['output_tokens']} out tokens" in body
    assert "Why live:</span> recorded live: a primary run makes every call for real" in body
    assert 'data-copy-from="' in page(response)


def test_a_failed_tool_step_shows_its_arguments_the_error_and_forks_at_the_failure(
        world: World) -> None:
    run = world.runs["flaky-tool"]
    html = text(world.client("bob").get(f"/runs/{run}/steps/fetch_inventory/1/"))
    assert '"region": "eu-west"' in html
    assert "upstream inventory service timed out after 30s" in html and "TimeoutError" in html
    started = Event.objects.get(run_id=run, type="node.started", node="fetch_inventory").seq
    assert f'href="/runs/{run}/?at={started - 1}" data-fork-step>Fork at the failure' in html


def test_viewers_read_steps_but_get_no_fork_button(world: World) -> None:
    html = page(world.client("vera").get(f"/runs/{world.runs['flaky-tool']}/steps/plan/1/"))
    assert "step-detail" in html and "data-fork-step" not in html


def test_htmx_gets_the_drawer_partial_and_pages_have_a_drawer_to_fill(world: World) -> None:
    run = world.runs["research-write"]
    client = world.client("bob")
    partial = page(client.get(f"/runs/{run}/steps/research/1/", headers=htmx("drawer")))
    assert partial.lstrip().startswith('<div class="step-detail"') and "<html" not in partial
    run_page = page(client.get(f"/runs/{run}/"))
    assert '<aside id="drawer"' in run_page
    assert f'hx-get="/runs/{run}/steps/research/1/" hx-target="#drawer"' in run_page
    live = page(client.get(f"/forks/{world.fork}/"))
    assert '<aside id="drawer"' in live and f"/runs/{world.fork}/steps/write/1/" in live


def test_an_inherited_step_of_a_fork_is_read_from_its_base(world: World) -> None:
    html = page(world.client("bob").get(f"/runs/{world.fork}/steps/research/1/"))
    assert "Inherited: this execution was recorded by run" in html
    assert world.runs["research-write"][:8] in html
    assert "data-fork-step" not in html  # fork it from the run that recorded it


def test_the_targeted_node_of_a_fork_says_why_it_ran(world: World) -> None:
    html = text(world.client("bob").get(f"/runs/{world.fork}/steps/write/1/"))
    assert "Write a poem." in html
    assert re.search(r"Why (live|changed):</span> made for real", html)


def test_an_unknown_step_is_a_404_that_names_it(world: World) -> None:
    response = world.client("bob").get(f"/runs/{world.runs['research-write']}/steps/write/9/")
    assert response.status_code == 404
    assert "&#x27;write&#x27; has no execution 9" in page(response)


def test_the_diff_opens_an_aligned_step_side_by_side_with_words_highlighted(
        world: World) -> None:
    base = world.runs["research-write"]
    client = world.client("bob")
    diff = page(client.get(f"/compare/{base}/{world.fork}/"))
    assert f'hx-get="/compare/{base}/{world.fork}/steps/1/" hx-target="#drawer"' in diff
    html = page(client.get(f"/compare/{base}/{world.fork}/steps/1/"))
    prompt = html.split(">system prompt <")[1].split("</div>\n      </div>")[0]
    assert "<del>" in prompt and "<ins>poem</ins>" in prompt
    reply = html.split(">reply <")[1]
    assert "<del>" in reply and "<ins>" in reply  # a different prompt, a different reply
    bad = client.get(f"/compare/{base}/{world.fork}/steps/99/")
    assert bad.status_code == 404 and "aligns 2 steps" in page(bad)


def test_share_links_open_steps_of_what_they_share_and_nothing_else(world: World) -> None:
    admin = world.users["demo"]
    run = world.runs["research-write"]
    link = sharing.create_share(user=admin, kind="run", target={"run": run})
    anonymous = Client()
    shared = page(anonymous.get(f"/s/{link.token}/"))
    assert f'/s/{link.token}/runs/{run}/steps/research/1/' in shared
    step = anonymous.get(f"/s/{link.token}/runs/{run}/steps/research/1/")
    assert step.status_code == 200 and "Read-only shared view" in page(step)
    assert "data-fork-step" not in page(step)
    other = anonymous.get(f"/s/{link.token}/runs/{world.runs['diamond']}/steps/plan/1/")
    assert other.status_code == 404
    diff = sharing.create_share(user=admin, kind="diff",
                                target={"base": run, "variant": world.fork})
    pair = anonymous.get(f"/s/{diff.token}/compare/{run}/{world.fork}/steps/1/")
    assert pair.status_code == 200 and "<ins>poem</ins>" in page(pair)


def _events(*items: tuple[str, dict]) -> list[dict]:
    start = {"seq": 4, "type": "node.started", "node": "n", "occurrence": 1, "iteration": 1,
             "payload": {"kind": "agent", "fingerprint": "f", "reads": {"q": "why?"}}}
    return [start] + [{"seq": 5 + i, "type": t, "node": "n", "occurrence": 1, "iteration": 1,
                       "payload": p} for i, (t, p) in enumerate(items)]


def test_calls_pair_requests_with_answers_in_order_and_long_values_fold() -> None:
    long_reply = "word " * (LONG_CHARS // 2)
    step = build(_events(
        ("agent.requested", {"role": "voters", "index": 0, "provider": "scripted",
                             "model": "m", "system_prompt": "S", "temperature": 0.5,
                             "messages": [{"role": "user", "content": "Q"}], "params": {}}),
        ("agent.responded", {"role": "voters", "index": 0, "model": "m", "text": "yes",
                             "input_tokens": 3, "output_tokens": 1, "cost_usd": 0.001,
                             "latency_ms": 2.0, "label": "reused", "request_hash": "h1"}),
        ("agent.requested", {"role": "judge", "index": None, "provider": "scripted",
                             "model": "m", "system_prompt": "J", "temperature": 0.0,
                             "messages": [], "params": {}}),
        ("agent.responded", {"role": "judge", "index": None, "model": "m", "text": long_reply,
                             "input_tokens": 5, "output_tokens": 400, "cost_usd": None,
                             "latency_ms": 0.0, "label": "changed", "request_hash": "h2"}),
        ("memory.written", {"key": "votes", "value": ["yes"], "tainted": True}),
        ("node.completed", {"next": [], "duration_ms": 7.5}),
    ), run_id="r", context=Context(is_fork=True, targeted=frozenset({"other"})))
    voters, judge = step.exchanges
    assert (voters.role, voters.label, voters.text) == ("voters[0]", "reused", "yes")
    assert judge.role == "judge" and judge.answer[0].long and not voters.answer[0].long
    assert judge.reason.startswith("made for real because the request differs")
    assert step.label == "changed" and step.cost_usd is None and step.tainted == ["votes"]
    assert (step.status, step.duration_ms, step.input_tokens) == ("completed", 7.5, 8)


def test_a_blocked_effect_labels_its_call_blocked_with_the_guard_reason() -> None:
    step = build(_events(
        ("tool.called", {"tool": "t", "effect": "write", "args": {"a": 1}, "args_hash": "x"}),
        ("effect.suppressed", {"inputs": {"a": 1}, "reason": "side effects are blocked"}),
    ), run_id="r", context=Context(is_fork=True))
    assert step.status == "blocked" and step.label == "blocked"
    assert step.exchanges[0].reason == "side effects are blocked"
