"""Answering an approval gate from the run page (``web/_run_live.html``'s ``#run-gate``).

A primary run recorded through the API or the CLI that paused at a gate has no fork live
view (``/forks/<primary>/`` leads to its run page), so its run page asks the gate's question,
with the fork live view's form (``web/_gate_answer.html``) for a member, posted to the one
answer view (``views.answers``), which goes through ``runs.control.answer``.

Each test records its own runs inside its rolled-back transaction (no module world: it would
flush the other modules' worlds, and an answer changes the run); the queued work that applies
an answer is captured and run inline, in the test's transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from forklab.engine.fork import fork
from forklab.engine.graph import load_graph
from forklab.engine.recording import run_recorded
from forklab.runs import sharing, tasks
from forklab.runs.engine_env import build_environment
from forklab.runs.models import Event, Membership, Project, Role, Run
from forklab.runs.store import DjangoStore
from tests.web.conftest import htmx, page

pytestmark = pytest.mark.django_db

GRAPH = load_graph(Path(__file__).with_name("gate.yaml"))
INPUT = {"ticket": "my parcel never arrived"}
PROMPT = "Send this reply to the customer?"
GATE = htmx("run-gate")


@dataclass
class Desk:
    project: Project
    users: dict[str, Any]
    store: DjangoStore

    def client(self, who: str) -> Client:
        client = Client()
        client.force_login(self.users[who])
        return client

    def paused_primary(self) -> str:
        """A primary run recorded without an answer: it pauses at the gate ``review``."""
        run_id = run_recorded(GRAPH, INPUT, store=self.store, env=build_environment(),
                              label="waiting").run_id
        assert Run.objects.get(pk=run_id).status == "paused"
        return str(run_id)

    def paused_fork(self) -> str:
        base = run_recorded(GRAPH, INPUT, store=self.store, env=build_environment(),
                            hitl=lambda _q: _approved(), label="answered").run_id
        run_id = fork(base, store=self.store, env=build_environment(),
                      at={"before_node": "review"}, label="paused fork").run_id
        assert Run.objects.get(pk=run_id).status == "paused"
        return str(run_id)


def _approved() -> Any:
    from forklab.engine.oracle import HumanAnswer

    return HumanAnswer(decision="approved")


@pytest.fixture
def desk() -> Desk:
    project = Project.objects.create(slug="reply-desk", name="Reply desk")
    users = {}
    for name, role in (("gate-admin", Role.ADMIN), ("gate-member", Role.MEMBER),
                       ("gate-viewer", Role.VIEWER)):
        users[name] = get_user_model().objects.create_user(name, password="pw")
        Membership.objects.create(user=users[name], project=project, role=role)
    outsider_project = Project.objects.create(slug="elsewhere", name="Elsewhere")
    users["gate-outsider"] = get_user_model().objects.create_user("gate-outsider",
                                                                  password="pw")
    Membership.objects.create(user=users["gate-outsider"], project=outsider_project,
                              role=Role.ADMIN)
    store = DjangoStore(project, created_by=users["gate-admin"])
    store.save_graph(GRAPH)
    return Desk(project=project, users=users, store=store)


@dataclass
class Answers:
    """Posting answers: what each post queued on commit (``tasks.enqueue_answer``) is kept in
    ``queued`` and run inline by :meth:`apply` (what a worker's ``continue_fork`` does)."""

    capture: Any  # pytest-django's django_capture_on_commit_callbacks
    queued: list[tuple[str, dict[str, Any]]]

    def post(self, client: Client, run_id: str, fields: dict[str, str],
             headers: dict[str, str] | None = None) -> Any:
        with self.capture(execute=True):  # the test's transaction never commits
            return client.post(f"/forks/{run_id}/answer/", fields, headers=headers or {})

    def apply(self) -> None:
        for run_id, _answer in self.queued:
            tasks.claim_and_drive(run_id)


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
            ) -> Answers:
    found: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(tasks, "enqueue_answer",
                        lambda run_id, answer: found.append((run_id, answer)))
    return Answers(capture=django_capture_on_commit_callbacks, queued=found)


def gate_section(html: str) -> str:
    """The run page's ``#run-gate`` (up to the live section's event rows; empty if none)."""
    if '<div id="run-gate"' not in html:
        return ""
    return html.split('<div id="run-gate"')[1].split('id="live-events"')[0]


def state(run_id: str) -> tuple[str, Any, int]:
    run = Run.objects.get(pk=run_id)
    return run.status, run.work, run.last_seq


def test_a_paused_primarys_run_page_asks_the_gates_question_with_the_answer_form(
        desk: Desk) -> None:
    run_id = desk.paused_primary()
    html = page(desk.client("gate-member").get(f"/runs/{run_id}/"))
    assert '<h2 id="run-live-h">Paused at an approval gate</h2>' in html
    gate = gate_section(html)
    assert PROMPT in gate and "Node <strong>review</strong> asks. The run continues" in gate
    assert "What it shows the approver" in gate and "reply" in gate  # its read slice
    assert f'hx-post="/forks/{run_id}/answer/" hx-target="#run-gate"' in gate
    assert 'name="target" value="run-gate"' in gate
    for decision in ("approved", "rejected", "edited"):
        assert f'name="decision" value="{decision}"' in gate
    assert "Keys this gate lets an answer set: <code>reply</code>." in gate


def test_a_valid_answer_from_the_run_page_is_stored_queued_and_the_run_resumes(
        desk: Desk, answers: Answers) -> None:
    run_id = desk.paused_primary()
    response = answers.post(desk.client("gate-member"), run_id, {
        "decision": "edited", "data": '{"note": "softer tone"}',
        "memory_updates": '{"reply": "We are sorry: a new parcel is on its way."}',
        "target": "run-gate"}, GATE)
    assert response.status_code == 200
    html = page(response)
    assert html.lstrip().startswith('<div id="run-gate"') and "<html" not in html
    assert "Answer sent (<strong>edited</strong> by gate-member): the run resumes" in html
    assert 'name="decision"' not in html  # no second answer offered
    assert '<h2 id="run-live-h" hx-swap-oob="true"><span class="spinner" aria-hidden="true">' \
           '</span> Answered: resuming</h2>' in html
    stored = Run.objects.get(pk=run_id).work
    assert stored["task"] == "answer" and stored["answer"]["memory_updates"] == {
        "reply": "We are sorry: a new parcel is on its way."}
    assert answers.queued == [(run_id, stored["answer"])]  # the work that applies it, queued

    # reloaded before a worker applied it, the page says so instead of asking again
    again = gate_section(page(desk.client("gate-member").get(f"/runs/{run_id}/")))
    assert "Answer sent (<strong>edited</strong> by gate-member)" in again
    assert 'name="decision"' not in again

    answers.apply()
    run = Run.objects.get(pk=run_id)
    assert run.status == "completed"
    assert run.memory["reply"] == "We are sorry: a new parcel is on its way."
    answered = Event.objects.get(run_id=run_id, type="human.answered").payload
    assert answered["decision"] == "edited" and answered["data"] == {"note": "softer tone"}
    finished = page(desk.client("gate-member").get(f"/runs/{run_id}/"))
    assert 'id="run-gate"' not in finished and "/answer/" not in finished


@pytest.mark.parametrize("decision", ["approved", "rejected"])
def test_approve_and_reject_from_the_run_page_both_let_the_run_go_on(
        desk: Desk, answers: Answers, decision: str) -> None:
    run_id = desk.paused_primary()
    response = answers.post(desk.client("gate-member"), run_id, {"decision": decision}, GATE)
    assert response.status_code == 200 and "Answer sent" in page(response)
    answers.apply()
    run = Run.objects.get(pk=run_id)
    assert run.status == "completed" and run.memory["approval"] == decision
    # approved: the tail after the gate ran; rejected: on_reject (end) stopped the run there
    assert ("summary" in run.memory) == (decision == "approved")


@pytest.mark.parametrize(("fields", "words", "code"), [
    ({"decision": "edited", "memory_updates": '{"note": "gift wrap"}'},
     "memory_updates.note is not declared: leave it out, or declare it in the gate&#x27;s "
     "&#x27;writes&#x27; after its decision key (writes: [approval, reply, note])",
     "invalid_overrides"),
    ({"decision": "edited", "memory_updates": '{"approval": "approved"}'},
     "memory_updates.approval would overwrite &#x27;approval&#x27;, which holds the decision",
     "invalid_overrides"),
    ({"decision": "edited", "memory_updates": '{"reply": "hi",'},
     "Memory updates (memory_updates) is not valid JSON: Expecting property name enclosed in "
     "double quotes (line 1, column 16); nothing was sent", "parse_error"),
    ({"decision": "edited", "data": "{nope"},
     "Edited data (data) is not valid JSON: Expecting property name enclosed in double quotes "
     "(line 1, column 2)", "parse_error"),
    ({"decision": "edited", "memory_updates": "[1, 2]"}, "memory_updates", "invalid_request"),
    ({"decision": "maybe"}, "decision", "invalid_request"),
])
def test_a_refused_answer_is_explained_in_the_form_with_its_code_and_stores_nothing(
        desk: Desk, answers: Answers, fields: dict[str, str], words: str, code: str) -> None:
    run_id = desk.paused_primary()
    before = state(run_id)
    response = answers.post(desk.client("gate-member"), run_id, fields, GATE)
    assert response.status_code == 422  # the one 4xx htmx swaps
    html = page(response)
    notice = html.split('<p class="notice bad" role="alert">')[1].split("</p>")[0]
    assert words in notice and notice.endswith(f"<code>{code}</code>")
    assert 'name="decision" value="approved"' in html  # the form again, to correct it
    for name in ("data", "memory_updates"):  # what was typed, kept
        if fields.get(name):
            typed = fields[name].replace('"', "&quot;")
            assert re.search(rf'name="{name}"[^>]*>{re.escape(typed)}</textarea>', html)
    assert state(run_id) == before and answers.queued == []


def test_answering_a_run_that_is_no_longer_paused_is_explained_in_its_section(
        desk: Desk, answers: Answers) -> None:
    run_id = desk.paused_primary()
    member = desk.client("gate-member")
    assert answers.post(member, run_id, {"decision": "approved"},
                       GATE).status_code == 200
    second = answers.post(member, run_id, {"decision": "rejected"}, GATE)
    assert second.status_code == 422  # stored, not applied yet: the first answer wins
    assert "was already answered (approved)" in page(second)
    assert "<code>already_answered</code>" in page(second)
    answers.apply()
    done = state(run_id)
    late = answers.post(member, run_id, {"decision": "rejected"}, GATE)
    assert late.status_code == 422
    html = page(late)
    assert "is completed, not paused at an approval gate" in html
    assert "<code>invalid_run_state</code>" in html and 'name="decision"' not in html
    assert "The run is completed now." in html
    assert state(run_id) == done and len(answers.queued) == 1


def test_a_viewer_sees_the_question_without_the_form_and_their_post_is_refused(
        desk: Desk, answers: Answers) -> None:
    run_id = desk.paused_primary()
    viewer = desk.client("gate-viewer")
    html = page(viewer.get(f"/runs/{run_id}/"))
    gate = gate_section(html)
    assert PROMPT in gate and "A project member can answer it." in gate
    assert "<form" not in gate and "/answer/" not in html and 'name="decision"' not in html
    before = state(run_id)
    for fields in ({"decision": "approved"},
                   {"decision": "edited", "memory_updates": "{not json"}):  # role first
        for headers in ({}, GATE):
            response = answers.post(viewer, run_id, fields, headers=headers)
            assert response.status_code == 403
            assert "answering an approval gate needs the member role" in page(response)
    assert state(run_id) == before and answers.queued == []
    outsider = desk.client("gate-outsider")
    assert outsider.get(f"/runs/{run_id}/").status_code == 404
    assert answers.post(outsider, run_id, {"decision": "approved"}).status_code \
        == 404
    assert state(run_id) == before


def test_finished_runs_and_share_links_show_no_answer_form(desk: Desk) -> None:
    answered = run_recorded(GRAPH, INPUT, store=desk.store, env=build_environment(),
                            hitl=lambda _q: _approved(), label="answered").run_id
    html = page(desk.client("gate-admin").get(f"/runs/{answered}/"))
    assert Run.objects.get(pk=answered).status == "completed"
    assert 'id="run-gate"' not in html and "/answer/" not in html  # (its prompt: in the log)
    paused = desk.paused_primary()
    token = sharing.create_share(user=desk.users["gate-admin"], kind="run",
                                 target={"run": paused}).token
    shared = page(Client().get(f"/s/{token}/"))
    assert 'id="run-gate"' not in shared and "/answer/" not in shared


def test_without_javascript_the_form_posts_and_comes_back_to_the_run_page(
        desk: Desk, answers: Answers) -> None:
    run_id = desk.paused_primary()
    member = desk.client("gate-member")
    refused = answers.post(member, run_id, {
        "decision": "edited", "memory_updates": '{"note": "x"}', "target": "run-gate"})
    assert refused.status_code == 422
    html = page(refused)
    assert "<html" in html and 'id="run-live"' in html  # the run page, with the refusal
    gate = gate_section(html)
    assert "memory_updates.note is not declared" in gate and "<code>invalid_overrides</code>" \
        in gate
    assert 'name="decision" value="approved"' in gate and answers.queued == []
    sent = answers.post(member, run_id, {"decision": "approved",
                                                    "target": "run-gate"})
    assert sent.status_code == 302 and sent["Location"] == f"/runs/{run_id}/"
    assert len(answers.queued) == 1
    answers.apply()
    late = answers.post(member, run_id, {"decision": "rejected", "target": "run-gate"})
    assert late.status_code == 422  # finished: no live section, the reason still shown
    html = page(late)
    assert "is completed, not paused at an approval gate" in html
    assert "<code>invalid_run_state</code>" in html


def test_a_paused_forks_run_page_answers_its_gate_too(
        desk: Desk, answers: Answers) -> None:
    run_id = desk.paused_fork()
    member = desk.client("gate-member")
    gate = gate_section(page(member.get(f"/runs/{run_id}/")))
    assert PROMPT in gate and "The fork continues once you answer." in gate
    response = answers.post(member, run_id, {
        "decision": "edited", "memory_updates": '{"reply": "Fixed."}'}, GATE)
    assert response.status_code == 200 and "Answer sent" in page(response)
    answers.apply()
    run = Run.objects.get(pk=run_id)
    assert run.status == "completed" and run.memory["reply"] == "Fixed."


def test_the_fork_live_views_panel_keeps_its_form_and_names_a_refusals_code(
        desk: Desk, answers: Answers) -> None:
    run_id = desk.paused_fork()
    member = desk.client("gate-member")
    panel = page(member.get(f"/forks/{run_id}/", htmx("fork-panel")))
    assert 'hx-target="#fork-panel"' in panel and "<code>reply</code>" in panel
    refused = answers.post(member, run_id, {
        "decision": "edited", "memory_updates": '{"note": "x"}'}, htmx("fork-panel"))
    assert refused.status_code == 422
    html = page(refused)
    assert html.lstrip().startswith('<aside id="fork-panel"')
    assert "<code>invalid_overrides</code>" in html and answers.queued == []
    sent = answers.post(member, run_id, {"decision": "approved"},
                       htmx("fork-panel"))
    assert sent.status_code == 200 and "Answer sent — continuing" in page(sent)
    assert len(answers.queued) == 1
