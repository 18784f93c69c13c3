"""``manage.py answer RUN --decision D``: a paused run — above all a primary recorded with
``manage.py record`` without ``--answer`` — is answered from the CLI and run on in the same
process, with the API's rules: first answer wins, only declared keys, nothing stored on a
refusal, ``error: <code>: <message>`` and exit 1."""

from __future__ import annotations

from typing import Any

import pytest

from forklab.runs.models import Event, Run
from forklab.runs.store import default_project
from tests.golden_runs import load_golden_run
from tests.runs.test_cli_fork import cli, cli_json

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def paused() -> str:
    run = load_golden_run(project=default_project(), scenario="order-fulfilment", paused=True)
    assert run.status == "paused"
    return run.id


def unchanged(run_id: str) -> tuple[Any, ...]:
    row = Run.objects.get(pk=run_id)
    return (row.status, row.work, row.last_seq,
            list(Event.objects.filter(run_id=run_id).values_list("seq", flat=True)))


def test_a_paused_run_answered_from_the_cli_runs_on_to_its_end(
        capsys: pytest.CaptureFixture[str], paused: str) -> None:
    code, out, err = cli(capsys, "answer", paused, "--decision", "rejected")
    assert (code, err) == (0, "")
    assert out.strip() == f"{paused} completed"
    run = Run.objects.get(pk=paused)
    assert "send_email" not in [step["node"] for step in run.path]  # rejected: no email
    answered = Event.objects.get(run_id=paused, type="human.answered")
    assert answered.payload["decision"] == "rejected"


def test_the_json_form_is_the_run(capsys: pytest.CaptureFixture[str], paused: str) -> None:
    run = cli_json(capsys, "answer", paused, "--decision", "approved")
    assert (run["id"], run["status"]) == (paused, "completed")


@pytest.mark.parametrize(("args", "code", "wording"), [
    (["--decision", "edited", "--memory-updates", '{"email": "eve@example.com"}'],
     "invalid_overrides", "memory_updates.email is not declared"),
    (["--decision", "edited", "--memory-updates", "{nope"], "invalid_argument",
     "--memory-updates is not valid JSON"),
    (["--decision", "maybe"], "invalid_argument", "invalid choice"),
])
def test_a_refused_answer_stores_nothing(capsys: pytest.CaptureFixture[str], paused: str,
                                         args: list[str], code: str, wording: str) -> None:
    before = unchanged(paused)
    status, out, err = cli(capsys, "answer", paused, *args)
    assert status == 1 and out == ""
    assert err.startswith(f"error: {code}: ") and wording in err, err
    assert unchanged(paused) == before


def test_a_run_that_is_not_paused_is_refused(capsys: pytest.CaptureFixture[str],
                                             paused: str) -> None:
    assert cli(capsys, "answer", paused, "--decision", "approved")[0] == 0
    status, _, err = cli(capsys, "answer", paused, "--decision", "approved")
    assert status == 1 and err.startswith("error: invalid_run_state: "), err
