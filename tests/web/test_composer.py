"""The fork composer: the page and its partial, fork links, the live preflight with errors next
to their fields, and submitting (``forking.start_fork`` → the live view)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from forklab.engine.fork.changes import parse_changes, wire
from forklab.runs.models import Run
from forklab.web.composer import decode_changes, encode_changes
from tests.web.conftest import HTMX, World, htmx, page

pytestmark = pytest.mark.django_db


def form(world: World, **fields: Any) -> dict[str, Any]:
    """A composer POST at ``before write`` of research-write, as the page renders it."""
    data = {"at": "6", "agent-1-model": "scripted-large", "agent-1-temperature": "0.7",
            "agent-1-prompt": "You are a science writer. Write a clear, friendly explanation.",
            "agent-0-model": "scripted-small", "agent-0-temperature": "0.2",
            "agent-0-prompt": "You are a careful researcher. List the key facts with sources.",
            "side_effects": "replay", "max_live_calls": "50", "max_cost_usd": "1.00"}
    data.update(fields)
    return data


def composer_url(world: World, suffix: str = "") -> str:
    return f"/runs/{world.runs['research-write']}/fork/{suffix}"


def test_the_composer_is_a_page_and_an_htmx_partial(world: World) -> None:
    client = world.client("bob")
    full = page(client.get(composer_url(world), {"at": 6}))
    assert "<html" in full and 'id="composer"' in full and "State at seq 6" in full
    partial = page(client.get(composer_url(world), {"at": 6}, headers=htmx("composer-slot")))
    assert partial.lstrip().startswith('<section id="composer"') and "<html" not in partial


def test_the_composer_fits_the_node_model_list_prompt_routes_and_gates(world: World) -> None:
    client = world.client("bob")
    html = page(client.get(composer_url(world), {"at": 6}))
    writer = html.split('name="agent-1-model"')[1].split("</select>")[0]
    assert '<option value="scripted-small" >scripted-small</option>' in writer
    assert "gpt-4o" not in writer  # a scripted agent is not offered a hosted model
    assert '<option value="scripted-large" selected>scripted-large (current)</option>' in html
    loop = page(client.get(f"/runs/{world.runs['review-loop']}/fork/", {"at": 11}))
    assert '<option value="gate|revise" >gate → revise</option>' in loop
    assert '<option value="gate|end" >gate → end</option>' in loop
    gate = page(client.get(f"/runs/{world.runs['order-fulfilment']}/fork/", {"at": 11}))
    assert "Answer approval gates" in gate and '<option value="approved"' in gate
    tool = page(client.get(f"/runs/{world.runs['order-fulfilment']}/fork/", {"at": 1}))
    assert 'name="tool_result"' in tool and "&quot;total&quot;" in tool  # the recorded result


def test_the_composer_refuses_viewers_and_hides_other_projects(world: World) -> None:
    assert world.client("vera").get(composer_url(world), {"at": 6}).status_code == 403
    assert world.client("eve").get(composer_url(world), {"at": 6}).status_code == 404
    assert world.client("bob").get(composer_url(world), {"at": 8}).status_code == 404


def test_a_fork_link_opens_the_composer_with_its_changes_filled_in(world: World) -> None:
    changes = [{"kind": "prompt", "target": "write", "system_prompt": "Rhyme, please."},
               {"kind": "memory", "set": {"notes": "none"}, "delete": []},
               {"kind": "model", "target": "research", "model": "gpt-4o-mini"}]
    assert wire(decode_changes(encode_changes(parse_changes(changes)))) == wire(
        parse_changes(changes))
    html = page(world.client("bob").get(composer_url(world),
                                        {"at": 6, "changes": encode_changes(parse_changes(changes))}))
    assert "Opened from a fork link" in html
    assert ">Rhyme, please.</textarea>" in html
    assert "&quot;notes&quot;: &quot;none&quot;" in html
    assert '<option value="gpt-4o-mini" selected>' in html
    broken = world.client("bob").get(composer_url(world), {"at": 6, "changes": "@@"})
    assert broken.status_code == 400
    assert "This fork link is damaged: the link&#x27;s changes cannot be read" in page(broken)


def test_the_preflight_estimates_the_composed_change(world: World) -> None:
    response = world.client("bob").post(
        composer_url(world, "preflight/"), form(world, **{"agent-1-prompt": "Write a haiku."}),
        headers=HTMX)
    html = page(response)
    assert '<dd id="preflight-calls">1</dd>' in html and "prompt of &#x27;write&#x27;" in html
    assert "6 events replayed for free" in html
    link = re.search(r'data-copy="(http://testserver/runs/\w+/fork/\?at=6&amp;changes=[\w-]+)"',
                     html)
    assert link, "the preflight refreshes the fork link"
    slots = re.findall(r'<p class="field-error" id="err-([\w-]+)" hx-swap-oob="true"', html)
    assert {"form", "memory_set", "agent-1-prompt", "max_live_calls"} <= set(slots)


def test_an_untouched_composer_is_a_null_fork(world: World) -> None:
    html = page(world.client("bob").post(composer_url(world, "preflight/"), form(world)))
    assert "No change yet: this is a null fork" in html


@pytest.mark.parametrize(("fields", "slot", "message"), [
    ({"memory_set": "{oops"}, "memory_set", "not valid JSON"),
    ({"memory_set": "[1]"}, "memory_set", "expected a JSON object"),
    ({"agent-1-temperature": "hot"}, "agent-1-temperature", "expected a number"),
    ({"agent-1-temperature": "3"}, "agent-1-temperature", "less than or equal to 2"),
    ({"max_live_calls": "500"}, "max_live_calls", "needs the admin role"),
    ({"agent-1-model": "no-such-model"}, "agent-1-model", "have no price"),
    ({"max_live_calls": "0"}, "max_live_calls", "the budget is 0"),
    ({"extra_changes": '[{"kind": "route", "from": "write", "to": "research"}]'},
     "extra_changes", "route"),
])
def test_preflight_errors_appear_next_to_the_field_that_caused_them(
        world: World, fields: dict[str, str], slot: str, message: str) -> None:
    html = page(world.client("bob").post(composer_url(world, "preflight/"),
                                         form(world, **fields), headers=HTMX))
    error = re.search(rf'id="err-{slot}" hx-swap-oob="true" role="alert">([^<]*)</p>', html)
    assert error and message in error.group(1), html[:400]
    assert "Not ready" in html


def test_starting_a_fork_goes_to_its_live_view(world: World) -> None:
    client = world.client("bob")
    response = client.post(composer_url(world), form(world, **{"agent-1-prompt": "Haiku!"},
                                                     label="haiku", client_request_id="req-1"))
    assert response.status_code == 302
    fork = Run.objects.get(label="haiku")
    assert response["Location"] == f"/forks/{fork.id}/"
    assert fork.parent_run_id == world.runs["research-write"] and fork.fork_sequence_id == 6
    assert fork.fork_mutations == [{"kind": "prompt", "target": "write",
                                    "system_prompt": "Haiku!"}]
    again = client.post(composer_url(world), form(world, **{"agent-1-prompt": "Haiku!"},
                                                  label="haiku", client_request_id="req-1"),
                        headers=HTMX)
    assert again["HX-Redirect"] == f"/forks/{fork.id}/"  # the same request: the same fork
    assert Run.objects.filter(label="haiku").count() == 1


def test_a_refused_submit_shows_the_composer_again_with_the_error(world: World) -> None:
    response = world.client("bob").post(composer_url(world),
                                        form(world, memory_set='{"a": 1', label="bad"),
                                        headers=HTMX)
    assert response.status_code == 422
    html = page(response)
    assert html.lstrip().startswith('<section id="composer"')
    assert re.search(r'id="err-memory_set" role="alert">not valid JSON', html)
    assert 'value="bad"' in html and ">{&quot;a&quot;: 1</textarea>" in html
    assert not Run.objects.filter(label="bad").exists()


def test_a_node_with_roles_offers_each_role_and_each_instance_of_a_repeated_one(
        world: World) -> None:
    url = f"/runs/{world.runs['panel-vote']}/fork/"
    html = page(world.client("bob").get(url, {"at": 1}))
    assert ">vote.voters <span" in html and ">vote.judge <span" in html
    assert "Single instances" in html and ">vote.voters[2] <span" in html
    legends = re.findall(r'<legend>(?:Agent of )?([\w.\[\]]+) <span', html)
    assert legends[:5] == ["vote.voters", "vote.judge", "vote.voters[0]", "vote.voters[1]",
                           "vote.voters[2]"]
    prefix = re.search(r'name="(agent-\d+)-prompt"[^>]*>Vote yes or no', html).group(1)  # type: ignore[union-attr]
    fields = {"at": "1", f"{prefix}-prompt": "Vote no unless it is Monday."}
    preflight = page(world.client("bob").post(f"{url}preflight/", fields, headers=HTMX))
    assert "prompt of &#x27;vote.voters&#x27;" in preflight


def test_a_post_at_a_seq_that_is_not_a_fork_point_is_a_404_not_an_error(world: World) -> None:
    client = world.client("bob")
    assert client.post(composer_url(world), form(world, at="8")).status_code == 404
    assert client.post(composer_url(world, "preflight/"), form(world, at="8")).status_code == 404


def test_an_emptied_prompt_warns_in_the_preflight(world: World) -> None:
    response = world.client("bob").post(composer_url(world, "preflight/"),
                                        form(world, **{"agent-1-prompt": "  "}), headers=HTMX)
    assert "The system prompt of &#x27;write&#x27; is empty" in page(response)
    fine = world.client("bob").post(composer_url(world, "preflight/"),
                                    form(world, **{"agent-1-prompt": "Be terse."}), headers=HTMX)
    assert "is empty" not in page(fine)


def test_the_composer_page_shows_the_state_of_its_point_beside_it(world: World) -> None:
    html = page(world.client("bob").get(composer_url(world), {"at": 1}))
    state = html.split('id="inspector"')[1].split("</section>")[0]
    assert "State at seq 1" in state and "1 key<" in state and "1 keys" not in html
    assert "Before <strong>research</strong> execution 1" in state
    assert 'class="chip next">read next' in state  # research reads goal


def test_agents_are_offered_only_the_models_their_provider_serves() -> None:
    from forklab.web.composer import models_for

    known = ["gpt-4o", "llama3.1:8b", "scripted-large", "scripted-small"]
    assert models_for("scripted", known, "scripted-small") == ("scripted-large", "scripted-small")
    assert models_for("openai", known, "my-finetune") == ("gpt-4o", "llama3.1:8b", "my-finetune")


def error_slot(html: str, name: str) -> str:
    found = re.search(rf'<p class="field-error" id="err-{name}"[^>]*>([^<]*)</p>', html)
    assert found, f"no error slot for {name}"
    return found.group(1)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "Infinity"])
def test_a_temperature_that_is_not_a_finite_number_is_refused_next_to_its_field(
        world: World, value: str) -> None:
    client = world.client("bob")
    fields = form(world, **{"agent-1-temperature": value}, label="not finite")
    submitted = client.post(composer_url(world), fields, headers=htmx("composer"))
    assert submitted.status_code == 422
    assert error_slot(page(submitted), "agent-1-temperature") == "Must be a finite number"
    preflight = page(client.post(composer_url(world, "preflight/"), fields,
                                 headers=htmx("preflight")))
    assert error_slot(preflight, "agent-1-temperature") == "Must be a finite number"
    assert not Run.objects.filter(label="not finite").exists()


@pytest.mark.parametrize(("fields", "slot", "says"), [
    ({"agent-1-temperature": "5"}, "agent-1-temperature", "Must be less than or equal to 2"),
    ({"max_live_calls": "-3"}, "max_live_calls", "Must be greater than or equal to 0"),
    ({"label": "x" * 201}, "label", "Must have at most 200 characters"),
])
def test_a_field_error_says_what_the_field_must_be_in_plain_words(
        world: World, fields: dict[str, str], slot: str, says: str) -> None:
    response = world.client("bob").post(composer_url(world), form(world, **fields),
                                        headers=htmx("composer"))
    assert response.status_code == 422
    text = error_slot(page(response), slot)
    assert text == says
    assert "field &#x27;" not in text and "change," not in text  # the API's wire wording


@pytest.mark.parametrize(("at", "says"), [
    ("abc", "at=&#x27;abc&#x27; is not a seq number"),
    ("7", "seq 7 is not a fork point of this run"),
    ("-1", "seq -1 is not a position in a run: fork points count from seq 1"),
])
def test_an_htmx_post_at_no_fork_point_shows_why_in_the_composer_and_starts_nothing(
        world: World, at: str, says: str) -> None:
    client = world.client("bob")
    fields = form(world, at=at, label="nowhere")
    submitted = client.post(composer_url(world), fields, headers=htmx("composer"))
    assert submitted.status_code == 422  # the one 4xx htmx swaps into the page
    html = page(submitted)
    assert html.lstrip().startswith('<section id="composer"') and says in html
    preflight = client.post(composer_url(world, "preflight/"), fields,
                            headers=htmx("preflight"))
    assert preflight.status_code == 422
    assert "Not ready:" in page(preflight) and says in page(preflight)
    plain = client.post(composer_url(world), fields)  # no htmx: the error page
    assert plain.status_code in (400, 404) and says in page(plain)
    assert not Run.objects.filter(label="nowhere").exists()


def test_an_htmx_post_by_a_reader_who_cannot_fork_says_so_in_the_composer(
        world: World) -> None:
    client = world.client("vera")
    submitted = client.post(composer_url(world), form(world), headers=htmx("composer"))
    assert submitted.status_code == 422
    assert "forking needs the member role" in page(submitted)
    assert client.post(composer_url(world), form(world)).status_code == 403


def test_an_error_on_another_nodes_agent_opens_its_folded_section(world: World) -> None:
    response = world.client("bob").post(composer_url(world),
                                        form(world, **{"agent-0-temperature": "nan"}),
                                        headers=htmx("composer"))
    assert response.status_code == 422
    html = page(response)
    assert re.search(r"<details open>\s*<summary>Agents of other nodes", html)
    assert error_slot(html, "agent-0-temperature") == "Must be a finite number"
    fine = page(world.client("bob").post(composer_url(world), form(world, label="x" * 201),
                                         headers=htmx("composer")))
    assert re.search(r"<details>\s*<summary>Agents of other nodes", fine)


def test_the_composer_names_every_point_as_the_api_does_the_end_one_included(
        world: World) -> None:
    """One wording per point (the engine's ``ForkPoint.label``), not a copy of it here."""
    import html as htmllib

    client = world.client("bob")
    run_id = world.runs["research-write"]
    points = client.get(f"/api/v1/runs/{run_id}/fork-points/").json()
    assert points[-1]["kind"] == "end"
    for point in points:
        composer = page(client.get(composer_url(world), {"at": point["seq"]}))
        shown = htmllib.unescape(composer.split('<p class="point">')[1].split(".")[0])
        assert shown == point["label"], point


def test_a_gate_answers_memory_updates_round_trip_through_a_fork_link(world: World) -> None:
    edit = [{"kind": "human_response", "decision": "edited", "data": {"why": "x"},
             "memory_updates": {"email": "LINKED"}}]
    url = f"/runs/{world.runs['order-fulfilment']}/fork/"
    html = page(world.client("bob").get(url, {"at": 11, "changes": encode_changes(
        parse_changes(edit))}))
    box = html.split('name="human_memory_updates"')[1].split("</textarea>")[0]
    assert "&quot;email&quot;: &quot;LINKED&quot;" in box  # filled in, not dropped


def test_an_undeclared_gate_key_is_refused_next_to_the_memory_updates_box(world: World) -> None:
    url = f"/runs/{world.runs['order-fulfilment']}/fork/preflight/"
    response = world.client("bob").post(url, {
        "at": "11", "human_decision": "edited", "human_memory_updates": '{"email": "x"}',
        "side_effects": "replay", "max_live_calls": "50", "max_cost_usd": "1.00"},
        headers=HTMX)
    html = page(response)
    slot = html.split('id="err-human_memory_updates"')[1].split("</p>")[0]
    assert "memory_updates.email is not declared" in slot
