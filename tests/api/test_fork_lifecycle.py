"""Forks, sweeps and cases end to end: tails run in the background (the thread-pool task
backend) and ``drain()`` waits for them — no sleeps."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from forklab.runs import readmodel
from forklab.runs.models import Event, GraphVersion, Run
from forklab.runs.task_backends import drain
from tests.api.conftest import API, World

pytestmark = pytest.mark.django_db(transaction=True)

SHORT = {"kind": "prompt", "target": "left", "system_prompt": "Answer in one sentence."}


def post(client: Client, path: str, body: Any = None) -> Any:
    return client.post(f"{API}{path}", body if body is not None else {},
                       content_type="application/json")


def settled(client: Client, path: str) -> dict[str, Any]:
    assert drain(timeout=60), "background tasks did not finish"
    response = client.get(f"{API}{path}")
    assert response.status_code == 200, response.json()
    return dict(response.json())


def test_a_fork_runs_in_the_background_and_reads_back_complete_with_its_diff(
    fresh_world: World,
) -> None:
    client = fresh_world.client("member")
    started = post(client, "/forks/", {"base_run": fresh_world.lab_diamond,
                                       "at": {"before_node": "left"}, "changes": [SHORT],
                                       "policy": {"memoize": True}, "label": "one sentence"})
    assert started.status_code == 202
    fork = settled(client, f"/forks/{started.json()['id']}/")
    assert (fork["state"], fork["status"], fork["not_run_reason"]) == (
        "complete", "completed", None)
    assert [s["node"] for s in fork["path"]] == ["plan", "left", "right", "join"]
    diff = fork["diff"]
    assert diff["divergence"] == {"index": 1, "base": "left", "variant": "left"}
    assert [step["op"] for step in diff["path"]["aligned"]] == [
        "same", "changed", "same", "changed"]
    assert diff["terminal"]["base"] == diff["terminal"]["variant"] == "completed"
    assert diff["attribution"] == "single" and "left" in diff["memory"]
    assert fork["explain"].startswith(
        f"fork {fork['id']} of {fresh_world.lab_diamond} at seq 6 (before 'left' execution 1")
    assert [(c["node"], c["label"]) for c in fork["calls"]] == [
        ("left", "changed"), ("right", "reused"), ("join", "changed")]
    assert fork["incurred_cost_usd"] == pytest.approx(diff["cost"]["incurred_usd"])
    assert fork["incurred_cost_usd"] > 0
    assert set(fork["estimate"]) == {"live_calls", "tokens", "cost_usd"}
    assert fork["suppressed_effects"] == []
    assert fork["memo_hits"] == [{"node": "right", "occurrence": 1}]

    diffed = client.get(f"{API}/diff/", {"base": fresh_world.lab_diamond,
                                         "variant": fork["id"]})
    assert diffed.status_code == 200 and diffed.json() == diff


def test_reading_a_finished_fork_reads_no_event_log(fresh_world: World) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from forklab.runs.models import Event, ForkResult

    client = fresh_world.client("member")
    started = post(client, "/forks/", {"base_run": fresh_world.lab_diamond,
                                       "at": {"before_node": "left"}, "changes": [SHORT],
                                       "policy": {"memoize": True}})
    fork_id = started.json()["id"]
    first = settled(client, f"/forks/{fork_id}/")  # the worker stored the result when done
    assert ForkResult.objects.filter(run_id=fork_id).exists()
    with CaptureQueriesContext(connection) as queries:
        again = client.get(f"{API}/forks/{fork_id}/")
    assert again.status_code == 200 and again.json() == first
    events_table = Event._meta.db_table
    touching = [q["sql"] for q in queries.captured_queries if events_table in q["sql"]]
    assert touching == []
    assert first["diff"]["divergence"]["base"] == "left"


def test_diffing_two_finished_runs_reads_no_event_log(fresh_world: World) -> None:
    """``/diff/`` reads the runs' stored final states through the read model (the diff the
    dashboard shows), not their logs."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from forklab.runs import readcache
    from forklab.runs.models import Event

    client = fresh_world.client("member")
    started = post(client, "/forks/", {"base_run": fresh_world.lab_diamond,
                                       "at": {"before_node": "left"}, "changes": [SHORT]})
    fork = settled(client, f"/forks/{started.json()['id']}/")
    readcache.clear_caches()  # cold: nothing read before
    with CaptureQueriesContext(connection) as queries:
        diffed = client.get(f"{API}/diff/", {"base": fresh_world.lab_diamond,
                                             "variant": fork["id"]})
    assert diffed.status_code == 200 and diffed.json() == fork["diff"]
    events_table = Event._meta.db_table
    assert [q["sql"] for q in queries.captured_queries if events_table in q["sql"]] == []


def test_a_stored_result_of_another_shape_is_recomputed_on_read(fresh_world: World) -> None:
    """The stored row is read as the typed StoredForkResult; one that does not fit it (an
    older shape) is rebuilt from the logs, never served or crashed on."""
    from forklab.runs.models import ForkResult, Run

    client = fresh_world.client("member")
    started = post(client, "/forks/", {"base_run": fresh_world.lab_diamond,
                                       "at": {"before_node": "left"}, "changes": [SHORT]})
    fork_id = started.json()["id"]
    expected = settled(client, f"/forks/{fork_id}/")
    current = Run.objects.get(pk=fork_id).last_seq
    ForkResult.objects.filter(run_id=fork_id).update(version=current, result={"diff": None})
    readmodel.forget()  # as a new process would: this one keeps the view it read
    assert client.get(f"{API}/forks/{fork_id}/").json() == expected
    assert ForkResult.objects.get(run_id=fork_id).result["diff"] == expected["diff"]


def test_a_stale_fork_result_is_recomputed_on_read(fresh_world: World) -> None:
    from forklab.runs.models import ForkResult

    client = fresh_world.client("member")
    started = post(client, "/forks/", {"base_run": fresh_world.lab_diamond,
                                       "at": {"before_node": "left"}, "changes": [SHORT]})
    fork_id = started.json()["id"]
    expected = settled(client, f"/forks/{fork_id}/")
    ForkResult.objects.filter(run_id=fork_id).update(version=0, result={"diff": None})
    readmodel.forget()  # as a new process would: this one keeps the view it read
    assert client.get(f"{API}/forks/{fork_id}/").json() == expected
    assert ForkResult.objects.get(run_id=fork_id).result["diff"] == expected["diff"]


def test_an_order_fork_pauses_at_the_gate_and_completes_once_approved(
    fresh_world: World,
) -> None:
    client = fresh_world.client("demo")
    base = fresh_world.demo_runs["order-fulfilment"]
    fork_id = post(client, "/forks/", {"base_run": base, "at": "start"}).json()["id"]
    paused = settled(client, f"/forks/{fork_id}/")
    assert (paused["state"], paused["diff"]) == ("paused", None)
    assert [s["node"] for s in paused["path"]][-1] == "approve"

    answered = post(client, f"/forks/{fork_id}/answer/", {"decision": "approved"})
    assert answered.status_code == 202
    done = settled(client, f"/forks/{fork_id}/")
    assert done["state"] == "complete"
    assert [s["node"] for s in done["path"]] == [
        "lookup_price", "charge", "approve", "send_email"]
    assert {(c["node"], c["label"]) for c in done["calls"]} >= {
        ("charge", "reused"), ("send_email", "reused")}


def test_a_second_answer_to_one_gate_is_409_and_the_first_one_wins(
        fresh_world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from forklab.runs import tasks

    client = fresh_world.client("demo")
    base = fresh_world.demo_runs["order-fulfilment"]
    fork_id = post(client, "/forks/", {"base_run": base, "at": "start"}).json()["id"]
    assert settled(client, f"/forks/{fork_id}/")["state"] == "paused"
    held: list[Any] = []  # both answers arrive before the first one is applied
    monkeypatch.setattr(tasks, "enqueue_answer", lambda run_id, answer: held.append(run_id))
    first = post(client, f"/forks/{fork_id}/answer/", {"decision": "rejected"})
    second = post(client, f"/forks/{fork_id}/answer/", {"decision": "approved"})
    assert (first.status_code, second.status_code) == (202, 409)
    assert second.json()["code"] == "already_answered"
    assert "already answered (rejected)" in second.json()["detail"]
    monkeypatch.undo()
    tasks.enqueue_answer(fork_id, {})
    done = settled(client, f"/forks/{fork_id}/")
    assert done["state"] != "paused"
    assert "send_email" not in [s["node"] for s in done["path"]]  # rejected: no email sent


def test_an_answer_setting_a_key_the_gate_does_not_declare_is_422_and_changes_nothing(
        fresh_world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from forklab.runs import tasks

    client = fresh_world.client("demo")
    base = fresh_world.demo_runs["order-fulfilment"]
    fork_id = post(client, "/forks/", {"base_run": base, "at": "start"}).json()["id"]
    paused = settled(client, f"/forks/{fork_id}/")
    assert paused["state"] == "paused"
    row = Run.objects.get(pk=fork_id)
    events = list(Event.objects.filter(run_id=fork_id).values_list("seq", "type"))
    enqueued: list[str] = []
    monkeypatch.setattr(tasks, "enqueue_answer", lambda run_id, answer: enqueued.append(run_id))

    response = post(client, f"/forks/{fork_id}/answer/",
                    {"decision": "edited", "memory_updates": {"email": "eve@example.com"}})

    assert response.status_code == 422
    assert response.json() == {
        "code": "invalid_overrides", "limit": "writes", "field": "memory_updates.email",
        "node": "approve", "expected": [], "undeclared": ["email"],
        "detail": "an answer to approval gate 'approve' may set only the memory keys the gate "
                  "declares in its 'writes' after the decision key (none); "
                  "memory_updates.email is not declared: leave it out, or declare it in the "
                  "gate's 'writes' after its decision key (writes: [approval, email])"}
    after = Run.objects.get(pk=fork_id)
    assert (after.status, after.work, after.last_seq) == ("paused", row.work, row.last_seq)
    assert list(Event.objects.filter(run_id=fork_id).values_list("seq", "type")) == events
    assert enqueued == []  # nothing was stored, nothing will be applied
    monkeypatch.undo()

    again = post(client, f"/forks/{fork_id}/answer/", {"decision": "rejected"})
    assert again.status_code == 202  # the gate still takes a valid answer
    assert settled(client, f"/forks/{fork_id}/")["state"] != "paused"


def test_an_answer_may_set_a_key_the_forks_graph_declares_for_the_gate(
        fresh_world: World) -> None:
    client = fresh_world.client("demo")
    base = fresh_world.demo_runs["order-fulfilment"]
    declare = {"kind": "config", "node": "approve", "patch": {"writes": ["approval", "note"]}}
    fork_id = post(client, "/forks/", {"base_run": base, "at": "start",
                                       "changes": [declare]}).json()["id"]
    assert settled(client, f"/forks/{fork_id}/")["state"] == "paused"

    answered = post(client, f"/forks/{fork_id}/answer/",
                    {"decision": "approved", "memory_updates": {"note": "gift wrap"}})

    assert answered.status_code == 202, answered.json()
    done = settled(client, f"/forks/{fork_id}/")
    assert done["state"] == "complete"
    assert Run.objects.get(pk=fork_id).memory["note"] == "gift wrap"


def test_cancelling_a_paused_fork(fresh_world: World) -> None:
    client = fresh_world.client("demo")
    base = fresh_world.demo_runs["order-fulfilment"]
    fork_id = post(client, "/forks/", {"base_run": base, "at": "start"}).json()["id"]
    assert settled(client, f"/forks/{fork_id}/")["state"] == "paused"
    cancelled = post(client, f"/forks/{fork_id}/cancel/")
    assert cancelled.status_code == 200
    assert (cancelled.json()["state"], cancelled.json()["cancel_requested"]) == (
        "cancelled", True)
    again = post(client, f"/forks/{fork_id}/answer/", {"decision": "approved"})
    assert again.status_code == 409 and again.json()["code"] == "invalid_run_state"


def test_promote_adopts_a_prompt_change_and_refuses_a_conflicting_second(
    fresh_world: World,
) -> None:
    client = fresh_world.client("admin")
    body = {"base_run": fresh_world.lab_diamond, "at": {"before_node": "left"}}
    first = post(client, "/forks/", {**body, "changes": [SHORT]}).json()["id"]
    second = post(client, "/forks/", {**body, "changes": [
        {**SHORT, "system_prompt": "Answer in two sentences."}]}).json()["id"]
    assert drain(timeout=60)
    promoted = post(client, f"/forks/{first}/promote/")
    assert promoted.status_code == 200
    assert promoted.json() | {"promoted": None} == {
        "graph_id": "diamond", "from_version": 1, "version": 2, "fork_run_id": first,
        "promoted": None, "skipped": []}
    latest = GraphVersion.objects.get(graph__project=fresh_world.lab, graph__graph_id="diamond",
                                      version=2)
    assert SHORT["system_prompt"] in json.dumps(latest.spec)
    conflict = post(client, f"/forks/{second}/promote/")
    assert conflict.status_code == 409
    assert conflict.json()["code"] == "promote_conflict"


def test_promote_refuses_a_change_its_tail_never_applied_unless_only_applied(
    fresh_world: World,
) -> None:
    client = fresh_world.client("admin")
    fork_id = post(client, "/forks/", {
        "base_run": fresh_world.lab_diamond, "at": {"before_node": "left"},
        "changes": [SHORT, {"kind": "prompt", "target": "plan", "system_prompt": "Plan."}],
    }).json()["id"]
    assert drain(timeout=60)

    refused = post(client, f"/forks/{fork_id}/promote/")
    assert refused.status_code == 409
    assert (refused.json()["code"], refused.json()["reason"]) == ("promote_conflict",
                                                                 "not_applied")
    assert [c["target"] for c in refused.json()["changes"]] == ["plan"]
    promoted = post(client, f"/forks/{fork_id}/promote/", {"only_applied": True})
    assert promoted.status_code == 200, promoted.json()
    assert [c["target"] for c in promoted.json()["promoted"]] == [SHORT["target"]]
    assert [s["change"]["target"] for s in promoted.json()["skipped"]] == ["plan"]


def test_a_finished_fork_saved_as_a_case_replays_as_a_passing_suite(
    fresh_world: World,
) -> None:
    client = fresh_world.client("member")
    fork_id = post(client, "/forks/", {"base_run": fresh_world.lab_diamond,
                                       "at": {"before_node": "left"},
                                       "changes": [SHORT]}).json()["id"]
    assert drain(timeout=60)
    saved = post(client, f"/forks/{fork_id}/save-case/", {
        "name": "short left", "criteria": [{"key": "left", "op": "exists"}]})
    assert saved.status_code == 201
    case = saved.json()
    assert (case["name"], case["project"], case["source_run_id"], case["graph"],
            case["graph_version"], case["changes"]) == (
        "short left", "lab", fork_id, "diamond", 1, [SHORT])
    taken = post(client, f"/forks/{fork_id}/save-case/", {"name": "short left"})
    assert taken.status_code == 409
    assert taken.json() == {"code": "case_exists", "name": "short left",
                            "detail": "project 'lab' already has a case named 'short left'; "
                                      "choose another name"}

    listed = client.get(f"{API}/cases/").json()
    assert [c["name"] for c in listed["results"]] == ["short left"]
    ran = post(client, "/cases/run/")
    assert ran.status_code == 200
    assert ran.json() == {"passed": True, "total": 1, "failed": 0, "results": [
        {"project": "lab", "name": "short left", "passed": True, "failures": [], "note": "",
         "graph_id": "diamond", "graph_version": 1}]}
    named = post(client, "/cases/run/", {"graph_version": 1}).json()
    assert [r["graph_version"] for r in named["results"]] == [1]
    missing = post(client, "/cases/run/", {"graph_version": 9}).json()
    assert missing["failed"] == 1
    assert "version 9 of graph 'diamond'" in missing["results"][0]["failures"][0]
    assert post(client, "/cases/run/", {"project": "demo"}).json()["total"] == 0

    # a criterion that can never hold (``in`` a number) fails its case, not the request
    assert post(client, f"/forks/{fork_id}/save-case/", {
        "name": "odd", "criteria": [{"key": "left", "op": "in", "value": 5}]}).status_code == 201
    ran = post(client, "/cases/run/").json()
    assert (ran["passed"], ran["total"], ran["failed"]) == (False, 2, 1)
    odd = next(r for r in ran["results"] if r["name"] == "odd")
    assert odd["passed"] is False and odd["failures"][0].startswith("left in 5 does not hold")


def test_a_sweep_runs_every_variant_and_summarises_their_diffs(fresh_world: World) -> None:
    client = fresh_world.client("member")
    body = {"base_run": fresh_world.lab_diamond, "at": {"before_node": "left"},
            "variants": {"short": [SHORT], "formal": {**SHORT, "system_prompt": "Be formal."}}}
    estimate = post(client, "/sweeps/estimate/", body)
    assert estimate.status_code == 200
    assert set(estimate.json()["variants"]) == {"short", "formal"}
    assert estimate.json()["cost_usd"] > 0

    started = post(client, "/sweeps/", body)
    assert started.status_code == 202
    group = started.json()["fork_group_id"]
    assert {v["state"] for v in started.json()["variants"].values()} <= {
        "queued", "running", "complete"}
    sweep = settled(client, f"/sweeps/{group}/")
    assert sweep["base_run_id"] == fresh_world.lab_diamond
    assert set(sweep["variants"]) == {"short", "formal"}
    for variant in sweep["variants"].values():
        assert (variant["status"], variant["state"]) == ("completed", "complete")
        assert variant["diff"]["divergence"]["base"] == "left"
        assert variant["diff"]["memory"]["left"] == "changed"
        assert variant["incurred_cost_usd"] > 0
    assert sweep["incurred_cost_usd"] == pytest.approx(
        sum(v["incurred_cost_usd"] for v in sweep["variants"].values()))
    runs = client.get(f"{API}/runs/", {"parent": fresh_world.lab_diamond}).json()
    assert {r["fork_group_id"] for r in runs["results"]} == {group}


def test_a_sweep_is_planned_by_its_request_and_not_again_by_its_worker(
        fresh_world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """``POST /sweeps/`` plans each variant once (stored on its row); the worker rebuilds
    those plans and runs them, planning nothing again."""
    from forklab.engine.fork import sweep as engine_sweep

    planned: list[Any] = []
    plan_at = engine_sweep.plan_at

    def counted(*args: Any, **kwargs: Any) -> Any:
        planned.append(kwargs.get("change"))
        return plan_at(*args, **kwargs)

    monkeypatch.setattr(engine_sweep, "plan_at", counted)
    client = fresh_world.client("member")
    body = {"base_run": fresh_world.lab_diamond, "at": {"before_node": "left"},
            "variants": {"short": [SHORT], "formal": {**SHORT, "system_prompt": "Be formal."}}}
    started = post(client, "/sweeps/", body)
    assert started.status_code == 202
    sweep = settled(client, f"/sweeps/{started.json()['fork_group_id']}/")
    assert {v["state"] for v in sweep["variants"].values()} == {"complete"}
    assert len(planned) == 2  # the request's two plans; none by the worker
