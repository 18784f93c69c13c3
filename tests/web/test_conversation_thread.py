"""The run page's conversation thread (SPEC §6.5): a support-agent step shows each turn, the
tool calls with their arguments and results, a fork marker before every turn and tool call,
and the per-call actions as fork links that prefill the composer."""

from __future__ import annotations

import base64
import dataclasses
import html as htmllib
import json
import re
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from forklab.engine.fork.changes import wire
from forklab.runs.conversations import build_thread, effects_from_graph
from forklab.runs.models import Event, Run
from forklab.web.composer import decode_changes
from forklab.web.conversation import encode
from tests.engine.golden_tool import load_golden
from tests.web.conftest import World, htmx, page

pytestmark = pytest.mark.django_db


def text(response: object) -> str:
    return htmllib.unescape(page(response))


def links(html: str, action: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """(href, changes) of every action link named ``action``."""
    found = re.findall(rf'<a class="btn small" href="([^"]+)" data-action="{action}" '
                       r'data-changes="([^"]+)"', html)
    return [(htmllib.unescape(href), json.loads(htmllib.unescape(changes)))
            for href, changes in found]


def link_changes(href: str) -> list[dict[str, Any]]:
    query = parse_qs(urlparse(href).query)
    raw = query["changes"][0]
    return json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))  # type: ignore[no-any-return]


def start_seq(run_id: str, node: str) -> int:
    return Event.objects.get(run_id=run_id, type="node.started", node=node).seq


def test_a_support_agent_step_reads_as_a_thread_of_turns_and_tool_calls(world: World) -> None:
    run = world.runs["support-agent"]
    response = world.client("bob").get(f"/runs/{run}/steps/assist/1/", headers=htmx("drawer"))
    assert response.status_code == 200
    html = text(response)
    assert list(re.findall(r'<li class="turn" data-call="([^"]+)"', html)) == [
        "assist#1/turn:1", "assist#1/turn:2", "assist#1/turn:3"]
    assert re.findall(r'<li class="toolcall" data-call="([^"]+)" data-tool="(\w+)" '
                      r'data-effect="(\w+)"', html) == [
        ("assist#1/turn:1/tool:1", "lookup_order", "read"),
        ("assist#1/turn:1/tool:2", "search_policy", "read"),
        ("assist#1/turn:2/tool:1", "issue_refund", "write")]
    assert '"order_id": "A-1001"' in html and '"refund_id": "R-' in html  # args and results
    assert "My order A-1001 arrived damaged. Please refund it." in html  # the user message
    reply = Event.objects.filter(run_id=run, type="agent.responded", node="assist") \
        .order_by("-seq").values_list("payload", flat=True)[0]
    assert reply["text"] in html
    assert f"{reply['input_tokens']} in + {reply['output_tokens']} out tokens" in html
    assert "2 earlier messages" in html  # turn 2's history folds; its tool results show


def test_every_turn_and_tool_call_has_a_fork_marker_before_its_call(world: World) -> None:
    run = world.runs["support-agent"]
    html = page(world.client("bob").get(f"/runs/{run}/steps/assist/1/"))
    markers = re.findall(r'<a class="forkmark" href="([^"]+)" data-before-call="([^"]+)"', html)
    assert [key for _, key in markers] == [
        "assist#1/turn:1", "assist#1/turn:1/tool:1", "assist#1/turn:1/tool:2",
        "assist#1/turn:2", "assist#1/turn:2/tool:1", "assist#1/turn:3"]
    point = start_seq(run, "assist") - 1
    for href, key in markers:
        href = htmllib.unescape(href)
        query = parse_qs(urlparse(href).query)
        assert urlparse(href).path == f"/runs/{run}/fork/"
        assert query == {"at": [str(point)], "call": [key]}


def test_the_actions_carry_reply_tool_result_and_rerun_changes_for_their_call(
        world: World) -> None:
    run = world.runs["support-agent"]
    html = page(world.client("bob").get(f"/runs/{run}/steps/assist/1/"))
    edits = links(html, "edit_reply")
    assert [c[0]["call"] for _, c in edits] == ["assist#1/turn:1", "assist#1/turn:2",
                                                 "assist#1/turn:3"]
    first = edits[0][1][0]
    assert first["kind"] == "reply" and first["text"] == ""
    assert [c["name"] for c in first["tool_calls"]] == ["lookup_order", "search_policy"]
    assert "tool_calls" not in edits[2][1][0]  # the final answer asks for no tool
    replaced = links(html, "replace_result")
    refund = replaced[2][1][0]
    assert refund["kind"] == "tool_result" and refund["call"] == "assist#1/turn:2/tool:1"
    assert refund["result"]["status"] == "issued"
    reruns = [c[0] for _, c in links(html, "rerun")]
    assert {"kind": "rerun", "call": "assist#1/turn:2/tool:1"} in reruns
    for href, changes in edits + replaced:  # the href carries what data-changes shows
        assert link_changes(href) == changes
        assert parse_qs(urlparse(href).query)["call"] == [changes[0]["call"]]


def test_edit_reply_opens_the_composer_before_the_call_prefilled_with_the_reply(
        world: World) -> None:
    run = world.runs["support-agent"]
    html = page(world.client("bob").get(f"/runs/{run}/steps/assist/1/"))
    href, changes = links(html, "edit_reply")[1]
    response = world.client("bob").get(href)
    assert response.status_code == 200
    composer = text(response)
    assert 'name="at_call" value="assist#1/turn:2"' in composer
    assert "Forks right before call" in composer
    field = re.search(r'<textarea id="f-extra" name="extra_changes"[^>]*>(.*?)</textarea>',
                      composer, re.S)
    assert field is not None
    assert json.loads(field.group(1)) == changes


def test_viewers_and_inherited_steps_get_the_thread_without_fork_links(world: World) -> None:
    run = world.runs["support-agent"]
    html = text(world.client("vera").get(f"/runs/{run}/steps/assist/1/"))
    assert 'data-call="assist#1/turn:3"' in html
    assert "forkmark" not in html and 'data-action="' not in html


def test_the_action_links_decode_as_the_composer_reads_fork_links() -> None:
    changes: list[dict[str, Any]] = [
        {"kind": "tool_result", "call": "assist#1/turn:1/tool:1", "result": {"found": False}},
        {"kind": "rerun", "call": "assist#1/turn:2/tool:1"}]
    assert wire(decode_changes(encode(changes))) == changes


def test_a_composer_link_with_a_call_that_is_no_call_key_is_refused(world: World) -> None:
    run = world.runs["support-agent"]
    point = start_seq(run, "assist") - 1
    response = world.client("bob").get(f"/runs/{run}/fork/?at={point}&call=assist")
    assert response.status_code == 400 and "is not a call key" in text(response)


def reply_form(run: str, **fields: str) -> dict[str, str]:
    """The composer as 'edit reply' of assist#1/turn:2 opens it, the reply text edited: the
    agent answers without refunding."""
    reply = [{"kind": "reply", "call": "assist#1/turn:2",
              "text": "I cannot refund this order; a colleague will follow up."}]
    data = {"at": str(start_seq(run, "assist") - 1), "at_call": "assist#1/turn:2",
            "extra_changes": json.dumps(reply), "side_effects": "replay",
            "max_live_calls": "50", "max_cost_usd": "1.00"}
    data.update(fields)
    return data


def test_the_composer_preflights_a_fork_right_before_the_call(world: World) -> None:
    run = world.runs["support-agent"]
    html = page(world.client("bob").post(f"/runs/{run}/fork/preflight/", reply_form(run),
                                         headers=htmx("preflight")))
    assert "Not ready" not in html, html[:600]
    assert "assist#1/turn:2" in htmllib.unescape(html)


def test_a_fork_started_from_edit_reply_forks_before_that_call_with_the_reply(
        world: World) -> None:
    run = world.runs["support-agent"]
    response = world.client("bob").post(f"/runs/{run}/fork/",
                                        reply_form(run, label="no-refund"))
    assert response.status_code == 302, page(response)[:600]
    fork = world.run(Run.objects.get(label="no-refund").id)
    assert fork.parent_run_id == run
    assert fork.fork_mutations == [{"kind": "reply", "call": "assist#1/turn:2",
                                    "text": "I cannot refund this order; a colleague will "
                                            "follow up.", "tool_calls": None}]


def test_a_served_tool_call_takes_its_effect_from_the_graph(world: World) -> None:
    run = world.run(world.runs["support-agent"])
    events = [e for e in load_golden("support-agent")["events"] if e["node"] == "assist"]
    for event in events:  # as a node.reused expansion writes it: no effect
        if event["type"] == "tool.called":
            event["payload"] = {**event["payload"], "effect": ""}
    thread = build_thread([e for e in events if e["type"] != "agent.requested"],
                          run_id=run.id, node="assist", occurrence=1)
    assert thread is not None and thread.served
    effects_from_graph(thread, run)
    assert [u.effect for t in thread.turns for u in t.tools] == ["read", "read", "write"]


def test_a_tools_asks_and_approval_show_under_the_tool_call_with_their_own_actions() -> None:
    from django.template.loader import render_to_string

    from forklab.engine.oracle import HumanAnswer
    from forklab.engine.recording import run_recorded
    from forklab.web.conversation import thread_view
    from tests.engine.agents.helpers import TICKET, FollowingModel, env_with
    from tests.engine.agents.test_tool_asks import record as record_asks
    from tests.engine.agents.test_tool_gates import gated_graph

    asking, _ = record_asks()
    gated = run_recorded(gated_graph(), dict(TICKET), env=env_with(FollowingModel()),
                         hitl=lambda request: HumanAnswer(decision="approved",
                                                          answered_by="ada"))
    run = Run(id="r1")
    html = {}
    for name, recorded in (("asks", asking), ("gated", gated)):
        thread = build_thread([e.to_wire() for e in recorded.event_log], run_id="r1",
                              node="assist", occurrence=1)
        assert thread is not None
        html[name] = render_to_string("web/_conversation.html", {
            "conversation": thread_view(thread, run, point=1, forkable=True)})
    asks = re.findall(r'<div class="ask" data-call="([^"]+)">', html["asks"])
    assert asks == ["assist#1/turn:1/tool:1/ask:1", "assist#1/turn:1/tool:1/ask:2"]
    edits = [c[0]["call"] for _, c in links(html["asks"], "edit_reply")]
    assert "assist#1/turn:1/tool:1/ask:2" in edits
    assert 'data-before-call="assist#1/turn:1/tool:1/ask:1"' in html["asks"]
    assert '<p class="approval" data-decision="approved">' in html["gated"]
    assert "by ada" in html["gated"]
    (answer,) = links(html["gated"], "answer_gate")
    assert answer[1] == [{"kind": "human_response", "call": "assist#1/turn:2/tool:1",
                          "decision": "rejected"}]
    assert links(html["asks"], "answer_gate") == []  # an ungated call has no gate to answer


def test_the_run_page_timeline_marks_the_tool_loop_that_has_a_conversation(
        world: World) -> None:
    run = world.runs["support-agent"]
    html = page(world.client("bob").get(f"/runs/{run}/"))
    assist, close = re.split(r'<li id="exec-', html)[1:3]
    assert 'data-node="assist"' in assist and 'data-node="close"' in close
    assert "3 turns · 3 tool calls" in assist
    assert 'class="loop"' not in close  # one model call, no tools: no loop


def test_an_imported_runs_turns_offer_a_re_ask_and_its_tool_calls_no_fork(
        world: World) -> None:
    from forklab.runs.traces import import_spans
    from tests.traces.test_mapping import workflow

    done = import_spans(user=None, project=world.demo, spans=workflow(), unreadable=[])
    (run,) = done.runs
    html = page(world.client("bob").get(f"/runs/{run}/steps/researcher/1/"))
    assert links(html, "edit_reply") == [] and links(html, "replace_result") == []
    reruns = [c[0] for _, c in links(html, "rerun")]
    assert reruns == [{"kind": "rerun", "call": "researcher#1/turn:1"},
                      {"kind": "rerun", "call": "researcher#1/turn:2"}]


def test_an_imported_runs_composer_at_a_node_point_says_what_is_possible(
        world: World, settings: Any) -> None:
    from forklab.runs.traces import import_spans
    from tests.traces.test_mapping import workflow

    settings.FORKLAB_TRACE_SETTLE_S = 0
    spans = [dataclasses.replace(s, trace_id="1" * 32) for s in workflow()]
    (run,) = import_spans(user=None, project=world.demo, spans=spans, unreadable=[]).runs
    response = world.client("bob").get(f"/runs/{run}/?at={start_seq(run, 'researcher') - 1}")
    assert response.status_code == 200
    forked = world.client("bob").post(f"/runs/{run}/fork/", {
        "at": start_seq(run, "researcher") - 1, "action": "preflight"})
    assert forked.status_code == 422
    assert "re-asks one replayable model call" in htmllib.unescape(forked.content.decode())
