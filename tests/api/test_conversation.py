"""``GET /runs/{id}/conversation/``: an agent execution's turns and tool calls as JSON, each
under its call key; the events API carries the call keys and tool calls it is built from."""

from __future__ import annotations

import pytest

from forklab.runs.task_backends import drain
from tests.api.conftest import API, World

pytestmark = pytest.mark.django_db


def test_the_conversation_lists_each_turn_and_tool_call_under_its_call_key(
        world: World) -> None:
    run = world.demo_runs["support-agent"]
    response = world.client("demo").get(f"{API}/runs/{run}/conversation/?node=assist")
    assert response.status_code == 200
    body = response.json()
    assert (body["run_id"], body["node"], body["occurrence"]) == (run, "assist", 1)
    assert body["system_prompt"].startswith("You are the support agent for Acme Widgets.")
    turns = body["turns"]
    assert [t["key"] for t in turns] == ["assist#1/turn:1", "assist#1/turn:2",
                                         "assist#1/turn:3"]
    assert [(u["key"], u["tool"], u["effect"]) for t in turns for u in t["tools"]] == [
        ("assist#1/turn:1/tool:1", "lookup_order", "read"),
        ("assist#1/turn:1/tool:2", "search_policy", "read"),
        ("assist#1/turn:2/tool:1", "issue_refund", "write")]
    refund = turns[1]["tools"][0]
    assert refund["arguments"] == {"order_id": "A-1001", "amount": 39.98}
    assert refund["result"]["status"] == "issued" and refund["label"] == "live"
    assert refund["call_id"] == turns[1]["tool_calls"][0]["id"]
    assert [m["role"] for m in turns[0]["new"]] == ["user"] and turns[0]["earlier"] == []
    assert [m["role"] for m in turns[2]["new"]] == ["tool"]
    assert turns[2]["finish_reason"] == "stop" and "refund id R-" in turns[2]["text"]
    assert all(t["input_tokens"] > 0 and t["cost_usd"] > 0 for t in turns)


def test_a_later_node_continuing_the_talk_shows_its_history_as_earlier_messages(
        world: World) -> None:
    run = world.demo_runs["support-agent"]
    body = world.client("demo").get(
        f"{API}/runs/{run}/conversation/?node=close&occurrence=1").json()
    (turn,) = body["turns"]
    assert turn["key"] == "close#1/turn:1" and turn["tools"] == []
    assert [m["role"] for m in turn["earlier"]] == [
        "user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]
    assert turn["new"] == [{"role": "user",
                            "content": "Write the closing line for this ticket."}]


def test_a_node_without_a_model_call_or_a_missing_node_is_not_found(world: World) -> None:
    run = world.demo_runs["order-fulfilment"]
    client = world.client("demo")
    for query in ("node=lookup_price", "node=nope", "node=lookup_price&occurrence=2"):
        response = client.get(f"{API}/runs/{run}/conversation/?{query}")
        assert response.status_code == 404, query
        assert response.json()["code"] == "not_found"
    missing = client.get(f"{API}/runs/{run}/conversation/")
    assert missing.status_code == 400 and missing.json()["field"] == "node"


def test_the_conversation_of_a_run_in_another_project_does_not_exist_for_you(
        world: World) -> None:
    run = world.demo_runs["support-agent"]
    response = world.client("admin").get(f"{API}/runs/{run}/conversation/?node=assist")
    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "detail": f"no run {run!r}",
                               "run_id": run}


def test_the_events_api_carries_call_keys_and_tool_calls(world: World) -> None:
    run = world.demo_runs["support-agent"]
    events = world.client("demo").get(f"{API}/runs/{run}/events/?type=agent.responded").json()
    first = events["results"][0]["payload"]
    assert first["call"] is None  # a first turn's key is derived: turn:1
    assert [c["name"] for c in first["tool_calls"]] == ["lookup_order", "search_policy"]
    called = world.client("demo").get(f"{API}/runs/{run}/events/?type=tool.called").json()
    assert [e["payload"]["call"] for e in called["results"]] == [
        "turn:1/tool:1", "turn:1/tool:2", "turn:2/tool:1"]


@pytest.mark.django_db(transaction=True)
def test_a_fork_with_an_edited_reply_lists_its_calls_by_key_and_its_new_conversation(
        fresh_world: World) -> None:
    client = fresh_world.client("demo")
    base = fresh_world.demo_runs["support-agent"]
    reply = {"kind": "reply", "call": "assist#1/turn:2", "text": "No refund is due."}
    started = client.post(f"{API}/forks/", {"base_run": base, "changes": [reply]},
                          content_type="application/json")
    assert started.status_code == 202, started.json()
    assert drain(timeout=60), "the fork did not finish"
    fork_id = started.json()["id"]
    fork = client.get(f"{API}/forks/{fork_id}/").json()
    assert fork["state"] == "complete", fork
    assert [(c["call"], c["label"]) for c in fork["calls"]][:4] == [
        ("assist#1/turn:1", "reused"), ("assist#1/turn:1/tool:1", "reused"),
        ("assist#1/turn:1/tool:2", "reused"), ("assist#1/turn:2", "simulated")]
    thread = client.get(f"{API}/runs/{fork_id}/conversation/?node=assist").json()
    assert [(t["key"], t["label"]) for t in thread["turns"]] == [
        ("assist#1/turn:1", "reused"), ("assist#1/turn:2", "simulated")]
    assert thread["turns"][1]["text"] == "No refund is due."
    assert thread["turns"][1]["tools"] == []  # the refund call is gone
