"""``/forks/``: preflight, start, idempotency, roles, and the errors of each verb.

These run inside a rolled-back transaction, so a started fork stays ``queued`` (its task is
enqueued on commit); ``test_fork_lifecycle`` runs tails in the background.
"""

from __future__ import annotations

from typing import Any

import pytest

from forklab.runs.models import ForkRequest, Run
from tests.api.conftest import API, World

pytestmark = pytest.mark.django_db

PROMPT = {"kind": "prompt", "target": "left", "system_prompt": "Answer in one sentence."}
FORK_KEYS = {"state", "not_run_reason", "cancel_requested", "base_run_id", "changes",
             "effective_fork_sequence_id", "estimate", "incurred_cost_usd",
             "suppressed_effects", "memo_hits", "calls", "diff", "explain", "warnings"}


def post(world: World, who: str, path: str, body: Any = None) -> Any:
    return world.client(who).post(f"{API}{path}", body if body is not None else {},
                                  content_type="application/json")


def fork_body(world: World, **extra: Any) -> dict[str, Any]:
    return {"base_run": world.lab_diamond, "at": {"before_node": "left"}, "changes": [PROMPT],
            **extra}


# -- preflight ---------------------------------------------------------------------------


def test_preflight_resolves_the_point_and_estimates_the_tail(world: World) -> None:
    response = post(world, "member", "/forks/preflight/", fork_body(world))
    assert response.status_code == 200
    body = response.json()
    assert {k: body[k] for k in ("fork_sequence_id", "fork_node_id",
                                 "effective_fork_sequence_id", "events_reused",
                                 "warnings")} == {
        "fork_sequence_id": 6, "fork_node_id": "left", "effective_fork_sequence_id": 6,
        "events_reused": 6, "warnings": []}
    assert set(body["estimate"]) == {"live_calls", "tokens", "cost_usd"}
    assert body["estimate"]["live_calls"] >= 1 and body["estimate"]["cost_usd"] > 0
    assert body["point"]["label"] == "before 'left' execution 1, iteration 1"
    assert body["changes"] == [PROMPT]


def test_preflight_starts_nothing(world: World) -> None:
    before = Run.objects.count()
    assert post(world, "member", "/forks/preflight/", fork_body(world)).status_code == 200
    assert Run.objects.count() == before


def test_viewers_can_read_but_not_preflight(world: World) -> None:
    response = post(world, "viewer", "/forks/preflight/", fork_body(world))
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


@pytest.mark.parametrize(("extra", "status", "code"), [
    ({"at": {"before_node": "nowhere"}}, 422, "fork_point_not_found"),
    ({"at": {"sequence": 3}}, 422, "fork_point_mid_node"),
    ({"at": "sideways"}, 422, "fork_point_not_found"),
    ({"changes": [{"kind": "telepathy"}]}, 422, "invalid_change"),
    ({"changes": [{"kind": "memory", "set": {"x": "[REDACTED]"}}]}, 422, "invalid_overrides"),
    ({"changes": [PROMPT, {**PROMPT, "system_prompt": "Other."}]}, 422, "conflicting_changes"),
    ({"changes": [{"kind": "model", "target": "left", "model": "gpt-unpriced-9"}]}, 422,
     "unpriced_model"),
    ({"budget": {"max_live_calls": 0}}, 422, "live_budget_exceeded"),
    ({"policy": {"side_effects": "sometimes"}}, 400, "invalid_request"),
    ({"budget": {"max_live_calls": -1}}, 400, "invalid_request"),
    ({"colour": "red"}, 400, "invalid_request"),
])
def test_preflight_errors(world: World, extra: dict[str, Any], status: int, code: str) -> None:
    response = post(world, "admin", "/forks/preflight/", fork_body(world, **extra))
    assert response.status_code == status, response.json()
    assert response.json()["code"] == code
    assert response.json()["detail"]


@pytest.mark.parametrize(("extra", "fields"), [
    ({"policy": {"side_effects": {"allow": 5}}}, ["policy.side_effects", "policy.side_effects.allow",
                                                  "policy.side_effects.allow"]),
    ({"policy": {"side_effects": {}}}, ["policy.side_effects", "policy.side_effects.allow"]),
    ({"budget": {"max_cost_usd": "lots"}}, ["budget.max_cost_usd"]),
])
def test_a_body_error_names_the_users_path_not_pydantics_union_members(
        world: World, extra: dict[str, Any], fields: list[str]) -> None:
    response = post(world, "admin", "/forks/preflight/", fork_body(world, **extra))
    assert response.status_code == 400, response.json()
    body = response.json()
    assert body["field"] == fields[0]
    assert [e["field"] for e in body["errors"]] == fields


@pytest.mark.parametrize(("tool", "says"), [
    ("os.system", "tool 'os.system' is outside the allowed modules"),
    ("forklab.engine.scenariosx.charge", "outside the allowed modules"),
    ("forklab.engine.scenarios.tools.nope", "cannot import tool"),
])
def test_a_config_change_to_a_tool_outside_the_allowed_modules_is_unknown_tool(
        world: World, tool: str, says: str) -> None:
    body = {"base_run": world.demo_runs["order-fulfilment"], "at": "start",
            "changes": [{"kind": "config", "node": "charge", "patch": {"tool": tool}}]}
    for path in ("/forks/preflight/", "/forks/"):
        response = post(world, "demo", path, body)
        assert response.status_code == 422, response.json()
        assert (response.json()["code"], response.json()["tool"]) == ("unknown_tool", tool)
        assert says in response.json()["detail"]


def test_a_config_change_to_an_allowed_tool_preflights(world: World) -> None:
    body = {"base_run": world.demo_runs["order-fulfilment"], "at": "start", "changes": [
        {"kind": "config", "node": "charge",
         "patch": {"tool": "forklab.engine.scenarios.tools.lookup_price"}}]}
    response = post(world, "demo", "/forks/preflight/", body)
    assert response.status_code == 200, response.json()


def test_a_fork_point_inside_a_node_names_the_node(world: World) -> None:
    response = post(world, "admin", "/forks/preflight/", fork_body(world, at={"sequence": 3}))
    assert response.status_code == 422
    assert response.json()["code"] == "fork_point_mid_node"
    assert "'plan'" in response.json()["detail"]


def test_an_unknown_node_lists_the_nodes_that_ran(world: World) -> None:
    response = post(world, "admin", "/forks/preflight/",
                    fork_body(world, at={"before_node": "nowhere"}))
    assert response.json()["detail"] == ("node 'nowhere' never ran in this run; nodes that "
                                         "ran: plan, left, right, join")


def test_a_missing_base_run_is_an_invalid_request(world: World) -> None:
    response = post(world, "admin", "/forks/preflight/", {"at": "start"})
    assert response.status_code == 400
    assert response.json() == {"code": "invalid_request", "detail": "field 'base_run': Field "
                               "required", "field": "base_run",
                               "errors": [{"field": "base_run", "msg": "Field required"}]}


# -- start -------------------------------------------------------------------------------


def test_starting_a_fork_answers_202_with_the_queued_fork(world: World) -> None:
    response = post(world, "member", "/forks/", fork_body(world, label="shorter"))
    assert response.status_code == 202
    fork = response.json()
    assert set(fork) >= FORK_KEYS
    assert (fork["state"], fork["status"], fork["run_kind"], fork["label"]) == (
        "queued", "queued", "counterfactual", "shorter")
    assert (fork["parent_run_id"], fork["base_run_id"]) == (world.lab_diamond,) * 2
    assert (fork["fork_sequence_id"], fork["fork_node_id"]) == (6, "left")
    assert fork["fork_mutations"] == fork["changes"] == [PROMPT]
    assert fork["diff"] is None and fork["explain"] is None and fork["calls"] is None
    assert Run.objects.get(pk=fork["id"]).created_by == world.users["member"]


def test_the_same_client_request_id_returns_the_same_fork(world: World) -> None:
    body = fork_body(world, client_request_id="ticket-42")
    first = post(world, "member", "/forks/", body)
    again = post(world, "member", "/forks/", body)
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Run.objects.filter(parent_run_id=world.lab_diamond).count() == 1
    assert ForkRequest.objects.filter(client_request_id="ticket-42").count() == 1


def test_another_user_with_the_same_key_gets_their_own_fork(world: World) -> None:
    body = fork_body(world, client_request_id="ticket-42")
    mine = post(world, "member", "/forks/", body).json()
    theirs = post(world, "admin", "/forks/", body)
    assert theirs.status_code == 202 and theirs.json()["id"] != mine["id"]


def test_forking_an_unfinished_run_is_409_run_in_progress(world: World) -> None:
    response = post(world, "member", "/forks/", {"base_run": world.lab_paused, "at": "start"})
    assert response.status_code == 409
    assert response.json() == {
        "code": "run_in_progress", "run_id": world.lab_paused, "status": "paused",
        "detail": f"run {world.lab_paused!r} is paused; only a finished run can be forked — "
                  "wait for it, answer it or cancel it first"}


def test_a_rejected_fork_writes_nothing(world: World) -> None:
    before = Run.objects.count()
    response = post(world, "member", "/forks/", fork_body(world, at={"before_node": "nowhere"},
                                                          client_request_id="k"))
    assert response.status_code == 422
    assert Run.objects.count() == before and not ForkRequest.objects.exists()


# -- roles -------------------------------------------------------------------------------


@pytest.mark.parametrize(("who", "extra", "status"), [
    ("viewer", {}, 403),
    ("member", {}, 202),
    ("member", {"budget": {"max_live_calls": 10, "max_cost_usd": 0.5}}, 202),
    ("member", {"policy": {"side_effects": {"allow": ["send_email"]}}}, 403),
    ("member", {"budget": {"max_live_calls": 51}}, 403),
    ("member", {"budget": {"max_cost_usd": 5}}, 403),
    ("member", {"budget": {"max_cost_usd": None}}, 403),
    ("member", {"ignore_budget": True}, 403),
    ("admin", {"policy": {"side_effects": {"allow": ["send_email"]}}}, 202),
    ("admin", {"budget": {"max_live_calls": 500, "max_cost_usd": None}}, 202),
    ("demo", {}, 404),  # admin of demo, not a member of lab
])
def test_role_matrix_for_starting_forks(world: World, who: str, extra: dict[str, Any],
                                        status: int) -> None:
    response = post(world, who, "/forks/", fork_body(world, **extra))
    assert response.status_code == status, response.json()
    if status == 403:
        assert response.json()["code"] == "permission_denied"
        assert response.json()["required"] == ("member" if who == "viewer" else "admin")
    if status == 404:
        assert response.json()["code"] == "not_found"


def test_a_member_is_told_why_admin_is_needed(world: World) -> None:
    response = post(world, "member", "/forks/", fork_body(
        world, policy={"side_effects": {"allow": True}}, budget={"max_cost_usd": 3}))
    assert response.status_code == 403
    assert response.json() == {
        "code": "permission_denied", "required": "admin", "role": "member",
        "reasons": ["allowing a write", "raising max_cost_usd above $1.00"],
        "detail": "allowing a write and raising max_cost_usd above $1.00 needs the admin "
                  "role in project 'lab'; you are member. Remove it, or ask a project admin."}


# -- reading and acting on one fork -------------------------------------------------------


def test_a_fork_reads_back_with_its_state(world: World) -> None:
    fork = post(world, "member", "/forks/", fork_body(world)).json()
    response = world.client("viewer").get(f"{API}/forks/{fork['id']}/")
    assert response.status_code == 200
    assert response.json() == fork


def test_a_run_that_is_not_a_fork_is_not_found_under_forks(world: World) -> None:
    for method, path in (("get", ""), ("post", "cancel/"), ("post", "answer/"),
                         ("post", "promote/"), ("post", "save-case/")):
        response = getattr(world.client("admin"), method)(
            f"{API}/forks/{world.lab_diamond}/{path}", {}, content_type="application/json")
        assert response.status_code == 404, path
        assert response.json() == {
            "code": "not_found", "run_id": world.lab_diamond,
            "detail": f"run {world.lab_diamond!r} is a primary run, not a fork"}


def test_a_fork_in_another_project_is_not_found(world: World) -> None:
    fork = post(world, "member", "/forks/", fork_body(world)).json()
    response = world.client("demo").get(f"{API}/forks/{fork['id']}/")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_cancelling_a_queued_fork_cancels_it_at_once(world: World) -> None:
    fork = post(world, "member", "/forks/", fork_body(world)).json()
    response = post(world, "member", f"/forks/{fork['id']}/cancel/")
    assert response.status_code == 200
    body = response.json()
    assert (body["state"], body["status"], body["cancel_requested"]) == (
        "cancelled", "cancelled", True)
    assert body["error"] == {"code": "cancelled", "message": "cancelled before it started"}


def test_viewers_cannot_cancel(world: World) -> None:
    fork = post(world, "member", "/forks/", fork_body(world)).json()
    response = post(world, "viewer", f"/forks/{fork['id']}/cancel/")
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


def test_answering_a_fork_that_is_not_paused_is_409(world: World) -> None:
    fork = post(world, "member", "/forks/", fork_body(world)).json()
    response = post(world, "member", f"/forks/{fork['id']}/answer/", {"decision": "approved"})
    assert response.status_code == 409
    assert response.json() == {
        "code": "invalid_run_state", "run_id": fork["id"], "status": "queued",
        "detail": f"run {fork['id']!r} is queued, not paused at an approval gate"}


def test_an_answer_needs_a_known_decision(world: World) -> None:
    fork = post(world, "member", "/forks/", fork_body(world)).json()
    response = post(world, "member", f"/forks/{fork['id']}/answer/", {"decision": "maybe"})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert response.json()["field"] == "decision"


@pytest.mark.parametrize("answer", [
    {"decision": "edited", "data": "[REDACTED]"},
    {"decision": "edited", "data": {"note": "[REDACTED]#2"}},
    {"decision": "approved", "memory_updates": {"email": "[redacted: mask failed]"}},
])
def test_an_answer_holding_a_redaction_placeholder_is_refused(world: World,
                                                              answer: dict[str, Any]) -> None:
    fork = post(world, "member", "/forks/", fork_body(world)).json()
    response = post(world, "member", f"/forks/{fork['id']}/answer/", answer)
    assert response.status_code == 422
    body = response.json()
    assert (body["code"], body["limit"]) == ("invalid_overrides", "redaction")
    assert body["detail"].startswith("an answer holds the redaction placeholder")
    assert Run.objects.get(pk=fork["id"]).work["task"] == "fork"  # no answer was stored


NOTE = {"kind": "human_response", "decision": "edited", "memory_updates": {"note": "gift"}}
NOTE_REFUSED = {
    "code": "invalid_overrides", "limit": "writes", "field": "memory_updates.note",
    "node": "approve", "expected": [], "undeclared": ["note"], "kind": "human_response",
    "detail": "a human_response change answering approval gate 'approve' may set only the "
              "memory keys the gate declares in its 'writes' after the decision key (none); "
              "memory_updates.note is not declared: leave it out, or declare it in the gate's "
              "'writes' after its decision key (writes: [approval, note]) — in the graph, or "
              "with a config change of 'approve' in this fork"}


def order_fork(world: World, *changes: dict[str, Any]) -> dict[str, Any]:
    return {"base_run": world.demo_runs["order-fulfilment"], "at": {"before_node": "approve"},
            "changes": list(changes)}


@pytest.mark.parametrize("path", ["/forks/preflight/", "/forks/"])
def test_a_human_response_writing_a_key_the_gate_does_not_declare_is_422_and_starts_nothing(
        world: World, path: str) -> None:
    before = (Run.objects.count(), ForkRequest.objects.count())
    response = post(world, "demo", path, order_fork(world, NOTE))
    assert response.status_code == 422
    assert response.json() == NOTE_REFUSED
    assert (Run.objects.count(), ForkRequest.objects.count()) == before


def test_a_sweep_variant_writing_an_undeclared_key_is_422_before_anything_starts(
        world: World) -> None:
    body = {"base_run": world.demo_runs["order-fulfilment"], "at": {"before_node": "approve"},
            "variants": {"note": NOTE, "plain": {"kind": "human_response",
                                                 "decision": "approved"}}}
    before = Run.objects.count()
    for path in ("/sweeps/estimate/", "/sweeps/"):
        response = post(world, "demo", path, body)
        assert response.status_code == 422, (path, response.json())
        assert {k: response.json()[k] for k in ("code", "field")} == {
            "code": "invalid_overrides", "field": "memory_updates.note"}
    assert Run.objects.count() == before


def test_a_config_change_declaring_the_key_lets_the_same_answer_through(world: World) -> None:
    declare = {"kind": "config", "node": "approve", "patch": {"writes": ["approval", "note"]}}
    response = post(world, "demo", "/forks/preflight/", order_fork(world, declare, NOTE))
    assert response.status_code == 200, response.json()


def test_promoting_needs_an_admin(world: World) -> None:
    fork = post(world, "member", "/forks/", fork_body(world)).json()
    response = post(world, "member", f"/forks/{fork['id']}/promote/")
    assert response.status_code == 403
    assert response.json()["required"] == "admin"


@pytest.mark.parametrize("action", ["promote/", "cancel/"])
def test_an_action_without_parameters_names_an_unknown_body_field(world: World,
                                                                  action: str) -> None:
    fork = post(world, "member", "/forks/", fork_body(world)).json()
    response = post(world, "admin", f"/forks/{fork['id']}/{action}", {"force": True})
    assert response.status_code == 400
    assert response.json() == {
        "code": "invalid_request", "detail": "field 'force': Extra inputs are not permitted",
        "field": "force", "errors": [{"field": "force", "msg": "Extra inputs are not permitted"}]}
    assert Run.objects.get(pk=fork["id"]).status == "queued"  # nothing was done


def test_an_unfinished_fork_cannot_be_saved_as_a_case(world: World) -> None:
    fork = post(world, "member", "/forks/", fork_body(world)).json()
    response = post(world, "member", f"/forks/{fork['id']}/save-case/", {"name": "short"})
    assert response.status_code == 409
    assert response.json()["code"] == "run_in_progress"
    assert response.json()["detail"] == (f"run {fork['id']!r} is queued and has recorded "
                                         "nothing yet; wait for it to finish, then try again")


@pytest.mark.parametrize("body", [{}, {"name": ""}, {"name": "x", "criteria": [{"op": "eq"}]},
                                  {"name": "x", "criteria": [{"key": "a", "op": "like"}]}])
def test_a_bad_case_request_is_invalid(world: World, body: dict[str, Any]) -> None:
    fork = post(world, "member", "/forks/", fork_body(world)).json()
    response = post(world, "member", f"/forks/{fork['id']}/save-case/", body)
    assert response.status_code == 400, response.json()
    assert response.json()["code"] == "invalid_request"


@pytest.mark.parametrize(("criteria", "field"), [
    ([{"op": "eq"}], "criteria[0].key"),
    ([{"key": "a"}, {"key": "a", "op": "like"}], "criteria[1].op"),
    ([{"key": "a", "extra": 1}], "criteria[0].extra"),
    (["a"], "criteria[0]"),
    ({"key": "a"}, "criteria"),
])
def test_a_bad_criterion_is_named_by_its_path(world: World, criteria: Any, field: str) -> None:
    fork = post(world, "member", "/forks/", fork_body(world)).json()
    response = post(world, "member", f"/forks/{fork['id']}/save-case/",
                    {"name": "x", "criteria": criteria})
    assert response.status_code == 400, response.json()
    assert (response.json()["code"], response.json()["field"]) == ("invalid_request", field)
    assert response.json()["detail"].startswith(f"field '{field}': ")


def test_a_fork_whose_request_no_longer_fits_reads_not_run_with_its_reason(
    world: World,
) -> None:
    from forklab.runs.specs import ForkSpec
    from forklab.runs.store import DjangoStore
    from forklab.runs.tasks import execute_fork

    body = fork_body(world)
    fork = post(world, "member", "/forks/", body).json()
    DjangoStore(world.lab).archive(world.lab_diamond)  # retention took the base's events
    assert execute_fork.call(fork["id"], ForkSpec.model_validate(body).model_dump(
        mode="json")) == "not_run"
    detail = world.client("member").get(f"{API}/forks/{fork['id']}/").json()
    assert (detail["state"], detail["status"], detail["not_run_reason"]) == (
        "not_run", "failed", "source_missing")
    assert detail["error"]["not_run"] is True and detail["diff"] is None


def test_a_fork_that_never_ran_cannot_be_saved_as_a_case_or_promoted_saying_why(
    world: World,
) -> None:
    from forklab.runs.specs import ForkSpec
    from forklab.runs.store import DjangoStore
    from forklab.runs.tasks import execute_fork

    body = fork_body(world)
    fork = post(world, "member", "/forks/", body).json()
    DjangoStore(world.lab).archive(world.lab_diamond)
    execute_fork.call(fork["id"], ForkSpec.model_validate(body).model_dump(mode="json"))

    for who, path, extra in (("member", "save-case", {"name": "never"}),
                             ("admin", "promote", None)):
        response = post(world, who, f"/forks/{fork['id']}/{path}/", extra)
        assert response.status_code == 409, response.json()
        assert response.json()["code"] == "invalid_run_state"
        assert response.json()["detail"].startswith(
            f"run {fork['id']!r} never ran (source_missing: ")


# -- sweeps and diffs ----------------------------------------------------------------------


def sweep_body(world: World, **extra: Any) -> dict[str, Any]:
    return {"base_run": world.lab_diamond, "at": {"before_node": "left"},
            "variants": {"short": [PROMPT], "formal": {**PROMPT, "system_prompt": "Formal."}},
            **extra}


def test_a_sweep_estimate_prices_each_variant(world: World) -> None:
    response = post(world, "member", "/sweeps/estimate/", sweep_body(world))
    assert response.status_code == 200
    body = response.json()
    assert set(body["variants"]) == {"short", "formal"}
    assert set(body["variants"]["short"]) == {"live_calls", "tokens", "cost_usd", "warnings"}
    assert body["cost_usd"] == pytest.approx(
        sum(v["cost_usd"] for v in body["variants"].values()))
    assert len(body["lines"]) == 2


def test_starting_a_sweep_queues_one_fork_per_variant(world: World) -> None:
    response = post(world, "member", "/sweeps/", sweep_body(world))
    assert response.status_code == 202
    body = response.json()
    assert (body["base_run_id"], body["fork_sequence_id"], body["incurred_cost_usd"]) == (
        world.lab_diamond, 6, 0.0)
    assert {name: (v["state"], v["diff"]) for name, v in body["variants"].items()} == {
        "short": ("queued", None), "formal": ("queued", None)}
    again = world.client("viewer").get(f"{API}/sweeps/{body['fork_group_id']}/")
    assert again.status_code == 200 and again.json() == body


@pytest.mark.parametrize(("who", "extra", "status", "code"), [
    ("viewer", {}, 403, "permission_denied"),
    ("member", {"variants": {}}, 400, "invalid_request"),
    ("member", {"variants": {"": PROMPT}}, 400, "invalid_request"),
    ("member", {"variants": {"  ": PROMPT}}, 400, "invalid_request"),
    ("member", {"variants": {"x" * 201: PROMPT}}, 400, "invalid_request"),
    ("member", {"variants": {"bad": {"kind": "telepathy"}}}, 422, "invalid_change"),
    ("member", {"at": {"before_node": "nowhere"}}, 422, "fork_point_not_found"),
    ("member", {"base_run": "nope"}, 404, "not_found"),
])
def test_bad_sweeps(world: World, who: str, extra: dict[str, Any], status: int,
                    code: str) -> None:
    for path in ("/sweeps/estimate/", "/sweeps/"):
        response = post(world, who, path, sweep_body(world, **extra))
        assert response.status_code == status, (path, response.json())
        assert response.json()["code"] == code


def test_an_empty_variant_name_is_named_in_the_error(world: World) -> None:
    response = post(world, "member", "/sweeps/", sweep_body(world, variants={"": PROMPT}))
    assert response.status_code == 400
    assert response.json() == {
        "code": "invalid_request", "field": "variants", "variant": "",
        "detail": "field 'variants': a variant name is 1 to 200 characters, not blank (it "
                  "labels the variant's fork); got ''"}


def test_an_unknown_sweep_is_not_found(world: World) -> None:
    response = world.client("member").get(f"{API}/sweeps/nope/")
    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "detail": "no sweep 'nope'",
                               "fork_group_id": "nope"}


def test_diff_of_a_run_with_itself_changes_nothing(world: World) -> None:
    run = world.lab_diamond
    response = world.client("viewer").get(f"{API}/diff/", {"base": run, "variant": run})
    assert response.status_code == 200
    diff = response.json()
    assert set(diff) == {"divergence", "path", "memory", "terminal", "cost",
                         "suppressed_effects", "attribution"}
    assert (diff["divergence"], diff["memory"], diff["attribution"]) == (None, {}, "single")
    assert {step["op"] for step in diff["path"]["aligned"]} == {"same"}


@pytest.mark.parametrize(("query", "status", "code"), [
    ({"base": "x"}, 400, "invalid_request"),
    ({"base": "nope", "variant": "nope"}, 404, "not_found"),
])
def test_bad_diffs(world: World, query: dict[str, str], status: int, code: str) -> None:
    response = world.client("viewer").get(f"{API}/diff/", query)
    assert response.status_code == status
    assert response.json()["code"] == code


def test_a_diff_across_projects_is_not_found(world: World) -> None:
    response = world.client("viewer").get(f"{API}/diff/", {
        "base": world.lab_diamond, "variant": world.demo_runs["diamond"]})
    assert response.status_code == 404
    assert response.json()["run_id"] == world.demo_runs["diamond"]


@pytest.mark.parametrize(("at", "field", "expected"), [
    ({"sequence": "x"}, "at.sequence", 'an integer, got "x"'),
    ({"sequence": [6]}, "at.sequence", "an integer, got [6]"),
    ({"sequence": True}, "at.sequence", "an integer, got true"),
    ({"sequence": 6.0}, "at.sequence", "an integer, got 6.0"),
    ({"sequence": "--6"}, "at.sequence", 'an integer, got "--6"'),
    ({"before_iteration": {}}, "at.before_iteration", "an integer, got {}"),
    ({"before_first_write_of": {"a": 1}}, "at.before_first_write_of", "a non-empty string"),
    ({"before_first_read_of": ["plan"]}, "at.before_first_read_of", "a non-empty string"),
    ({"before_node": {"a": 1}}, "at.before_node", "a non-empty string"),
    ({"before_node": "left", "occurrence": [1]}, "at.occurrence", 'from 1, or "last"'),
    ({"before_node": "left", "occurrence": 0}, "at.occurrence", 'from 1, or "last"'),
    ({"before_human_input": False}, "at.before_human_input", "true, got false"),
    ({"sequence": 6, "colour": "red"}, "at.colour",
     "no other key with 'sequence' (optional: run_id)"),
    ({"before_node": "left", "run_id": "x"}, "at.run_id",
     "no other key with 'before_node' (optional: occurrence)"),
    ({"sequence": 6, "before_node": "left"}, "at", "exactly one of sequence, before_node, "
     "before_call, after_node, before_iteration, before_human_input, before_first_write_of, "
     "before_first_read_of, version; got sequence, before_node"),
    ({}, "at", "; got none"),
])
def test_a_malformed_fork_point_is_an_invalid_request_naming_the_key(
        world: World, at: Any, field: str, expected: str) -> None:
    for path in ("/forks/preflight/", "/forks/"):
        response = post(world, "member", path, fork_body(world, at=at))
        assert response.status_code == 400, response.json()
        body = response.json()
        assert (body["code"], body["field"]) == ("invalid_request", field)
        assert body["detail"].startswith(f"field '{field}': expected ")
        assert expected in body["detail"]


def test_a_fork_point_seq_may_be_a_string_of_digits(world: World) -> None:
    response = post(world, "member", "/forks/preflight/", fork_body(world, at={"sequence": "6"}))
    assert response.status_code == 200
    assert response.json()["fork_node_id"] == "left"


@pytest.mark.parametrize(("at", "status", "code"), [
    ({"version": {}}, 400, "invalid_request"), ({"version": "v1"}, 400, "invalid_request"),
    ("version:x", 422, "fork_point_not_found")])
def test_a_malformed_snapshot_version_is_refused_not_crashed(world: World, at: Any, status: int,
                                                             code: str) -> None:
    response = post(world, "member", "/forks/preflight/", fork_body(world, at=at))
    assert response.status_code == status, response.json()
    assert response.json()["code"] == code
