"""The CLI edge: every bad argument is one line ``error: <code>: <message>``, exit 1, no
usage dump, no traceback — and nothing stored. Includes the argument parser's own errors,
non-finite numbers, NaN in JSON flags, NUL and bytes that are not UTF-8 in arguments, and
rows an older version stored unreadable (``runs --json`` must still list everything).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import load_command_class

from forklab.engine.scenarios import SCENARIOS
from forklab.runs.models import Run
from forklab.runs.services import ensure_project, record_run

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def keep_the_test_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_from_argv`` closes every connection at the end, as manage.py must; the test
    still needs its own afterwards (to check that nothing was stored)."""
    from django.db import connections

    monkeypatch.setattr(connections, "close_all", lambda: None)


def run_cli(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> tuple[int, str, str]:
    """Run a command the way manage.py does (so errors are printed, not raised)."""
    command = load_command_class("forklab.runs", name)
    code = 0
    try:
        command.run_from_argv(["manage.py", name, *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, expected: str, says: str = "") -> None:
    assert code == 1, err
    assert err.count("\n") == 1 and err.startswith(f"error: {expected}: "), err
    assert "usage:" not in err and "Traceback" not in err
    assert says in err, err


@pytest.fixture
def base_run() -> str:
    scenario = SCENARIOS["research-write"]
    project = ensure_project(slug="default")
    return record_run(project=project, graph=scenario.graph(), input=dict(scenario.input)).id


@pytest.mark.parametrize("args, says", [
    (["RUN", "--bogus"], "unrecognized arguments: --bogus"),
    (["RUN", "--max-live-calls", "many"], "invalid int value: 'many'"),
    (["RUN", "--human", "maybe"], "invalid choice: 'maybe'"),
    ([], "the following arguments are required: run"),
    (["RUN", "--source"], "expected one argument"),
])
def test_argument_parser_errors_are_one_line_not_a_usage_dump(
        capsys: pytest.CaptureFixture[str], base_run: str, args: list[str], says: str) -> None:
    args = [base_run if a == "RUN" else a for a in args]
    code, out, err = run_cli(capsys, "fork", *args)
    assert_one_line_error(code, err, "invalid_argument", says)
    assert out == ""


def test_parser_errors_of_subcommands_are_one_line_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "cases", "save")
    assert_one_line_error(code, err, "invalid_argument", "required")


def test_help_still_prints_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "fork", "--help")
    assert code == 0 and out.startswith("usage:")


@pytest.mark.parametrize("flags, code_, says", [
    (["--max-cost-usd", "nan"], "invalid_input", "--max-cost-usd: 'nan' is not a finite number"),
    (["--max-cost-usd", "inf"], "invalid_input", "'inf' is not a finite number"),
    (["--temperature", "write=NaN"], "invalid_input", "--temperature write: 'NaN'"),
    (["--set", "notes=NaN"], "invalid_input", "NaN is not valid JSON"),
    (["--set", 'notes="a\\ud800"'], "invalid_input", "--set notes: the string"),
    (["--set", 'notes="a\\u0000"'], "invalid_input", "NUL character"),
    (["--output", "write=" + "[" * 5000 + "]" * 5000], "invalid_input", "nested deeper"),
    (["--input-patch", '{"goal": Infinity}'], "invalid_input", "Infinity is not valid JSON"),
    (["--label", "a\x00b"], "invalid_input", "--label: the string holds a NUL"),
    (["--label", "caf\udce9"], "invalid_input", "--label: the string 'caf\\\\udce9'"),
])
def test_bad_numbers_and_values_in_flags_are_invalid_input_and_fork_nothing(
        capsys: pytest.CaptureFixture[str], base_run: str, flags: list[str], code_: str,
        says: str) -> None:
    before = Run.objects.count()
    code, _, err = run_cli(capsys, "fork", base_run, "--at", "start", *flags)
    assert_one_line_error(code, err, code_, says)
    assert Run.objects.count() == before


@pytest.mark.parametrize("text, says", [
    ('{"goal": NaN}', "NaN is not valid JSON"),
    ('{"goal": "\\udfff"}', "--input.goal: the string"),
    ('{"goal": ' * 100 + "1" + "}" * 100, "nested deeper than 64 levels"),
])
def test_record_refuses_an_input_no_store_can_keep(capsys: pytest.CaptureFixture[str],
                                                   text: str, says: str) -> None:
    before = Run.objects.count()
    code, _, err = run_cli(capsys, "record", "research-write", "--input", text)
    assert_one_line_error(code, err, "invalid_input", says)
    assert Run.objects.count() == before


def test_a_graph_file_holding_a_nul_is_invalid_input(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps({"id": "g", "start": "a", "nodes": [
        {"id": "a", "kind": "agent", "agent": {"model": "scripted-small",
                                                "system_prompt": "x\u0000"},
         "writes": ["out"]}]}))
    code, _, err = run_cli(capsys, "record", str(graph))
    assert_one_line_error(code, err, "invalid_input", "NUL character")


def test_runs_json_lists_a_row_an_older_version_stored_unreadable(
        capsys: pytest.CaptureFixture[str], base_run: str) -> None:
    other = record_run(project=ensure_project(slug="default"),
                       graph=SCENARIOS["diamond"].graph(), input=dict(SCENARIOS["diamond"].input))
    Run.objects.filter(pk=base_run).update(input={"goal": "old \ud800 row"})
    code, out, err = run_cli(capsys, "runs", "--json")
    assert code == 0, err
    rows = {row["id"]: row for row in json.loads(out)}
    assert (rows[base_run]["error"]["code"], rows[base_run]["input"]) == ("unreadable", {})
    assert (rows[other.id]["error"], rows[other.id]["input"]) == (None, other.input)


def test_arguments_that_are_not_utf8_are_one_line_from_a_real_process(
        tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'cli.sqlite3'}"}
    result = subprocess.run([sys.executable, "manage.py", "runs", "--graph", b"\xff\xfe"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: invalid_input: --graph: the string"), result.stderr
    assert result.stderr.count("\n") == 1
