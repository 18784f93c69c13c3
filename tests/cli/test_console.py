"""The ``forklab`` console command: the product's verbs over the management commands
(SPEC §4.2 — one implementation behind ``forklab VERB`` and ``manage.py VERB``)."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command, get_commands

import forklab
from forklab.console import main, verbs
from forklab.runs.services import ensure_project
from tests.golden_runs import load_golden_run

pytestmark = pytest.mark.django_db


def forklab_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_help_lists_every_product_verb_and_none_of_djangos(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = forklab_cli(capsys, "--help")
    assert code == 0
    listed = {line.split()[0] for line in out.split("verbs:\n")[1].split("\n\n")[0].splitlines()
              if line.startswith("  ") and not line.startswith("   ")}
    ours = {name for name, app in get_commands().items() if app == "forklab.runs"}
    assert listed == ours - {"db_worker"} == set(verbs())
    assert {"serve", "worker", "record", "fork", "sweep", "diff", "forkpoints", "forkcheck",
            "runs", "answer", "cases", "replay", "promote", "demo"} <= listed
    assert "migrate" not in listed and "forklab migrate" in out


def test_version_prints_the_packages_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert forklab_cli(capsys, "--version") == (0, f"forklab {forklab.__version__}\n", "")


def test_python_dash_m_forklab_is_the_same_command() -> None:
    done = subprocess.run([sys.executable, "-m", "forklab", "--version"],
                          capture_output=True, text=True, check=True)
    assert done.stdout == f"forklab {forklab.__version__}\n"


def test_an_unknown_verb_is_one_error_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = forklab_cli(capsys, "frok", "RUN")
    assert (code, out) == (1, "")
    assert err == ("error: invalid_argument: unknown command 'frok'; forklab --help lists "
                   "the commands\n")


def test_a_verbs_flags_and_output_are_the_management_commands(
        capsys: pytest.CaptureFixture[str]) -> None:
    load_golden_run(project=ensure_project(slug="team", name="Team"), scenario="diamond")
    manage = StringIO()
    call_command("runs", "--json", "--kind", "primary", stdout=manage)
    code, out, err = forklab_cli(capsys, "runs", "--json", "--kind", "primary")
    assert (code, err) == (0, "")
    assert json.loads(out) == json.loads(manage.getvalue()) and len(json.loads(out)) == 1


def test_a_verbs_user_error_is_the_commands_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = forklab_cli(capsys, "runs", "--no-such-flag")
    assert (code, out) == (1, "")
    assert err.startswith("error: invalid_argument: ") and err.count("\n") == 1


def test_help_of_a_verb_is_its_commands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = forklab_cli(capsys, "help", "fork")
    assert code == 0 and out.startswith("usage: forklab fork ") and "--at AT" in out


def test_worker_in_embedded_mode_says_there_is_no_queue(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = forklab_cli(capsys, "worker")
    assert (code, out) == (1, "")
    assert err.startswith("error: invalid_argument: no task queue to work: embedded mode")
