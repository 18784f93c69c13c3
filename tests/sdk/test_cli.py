"""A workflow run through the CLI: ``record --workflow``, the allow-list, and a fork of the
recorded run by ``forkpoints`` and ``fork`` (SPEC §7)."""

from __future__ import annotations

import json

import pytest
from django.core.management import load_command_class

from forklab.runs.models import Run
from tests.vendor_stub import VendorStub

SUPPORT = "forklab.demo_agents.support:support"
TICKET = json.dumps({"ticket": "Order A-1001 arrived damaged, please refund 39.98"})


def cli(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> tuple[int, str, str]:
    """Run a command as manage.py does (errors become one line on stderr and exit 1)."""
    command = load_command_class("forklab.runs", name)
    code = 0
    try:
        command.run_from_argv(["manage.py", name, *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.django_db(transaction=True)
def test_record_workflow_records_a_run_and_the_cli_forks_it(
        clients: VendorStub, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "record", "--workflow", SUPPORT, "--input", TICKET, "--json")
    assert code == 0, err
    run = json.loads(out)
    assert (run["status"], run["graph"], run["run_kind"]) == ("completed", "support", "primary")
    assert run["memory"]["output"].startswith("Results: ")
    assert [p["node"] for p in run["path"]] == ["support"]

    code, out, err = cli(capsys, "forkpoints", run["id"], "--json")
    assert code == 0, err
    assert [p["call"] for p in json.loads(out) if p["kind"] == "before_call"] == [
        "support#1/tool:lookup_order#1", "support#1/tool:issue_refund#1", "support#1/openai:2"]

    clients.reset()
    code, out, err = cli(capsys, "fork", run["id"], "--reply",
                         'support/openai:2="No refund is due."', "--json")
    assert code == 0, err
    forked = json.loads(out)
    assert forked["memory"]["output"] == "No refund is due."
    assert forked["run_kind"] == "counterfactual"
    assert clients.requests == []


@pytest.mark.django_db(transaction=True)
def test_record_refuses_a_workflow_outside_the_allowed_modules(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "record", "--workflow", "os:system")
    assert code == 1
    assert err.startswith("error: unknown_workflow: workflow 'os:system' is outside the "
                          "allowed modules")
    assert "FORKLAB_WORKFLOW_MODULES" in err and "Traceback" not in err
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_record_takes_a_graph_or_a_workflow_not_both(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "record", "diamond", "--workflow", SUPPORT)
    assert code == 1 and "one of them" in err

