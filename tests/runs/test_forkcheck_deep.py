"""``manage.py forkcheck --deep`` (issue 8): the metamorphic checks over every recorded run —
their text, their ``--json``, and exit 1 with the diff printed when a relation breaks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.management import load_command_class
from django.test import override_settings

from forklab.engine.graph import parse_graph
from forklab.engine.scenarios import SCENARIOS
from forklab.runs.services import record_run
from forklab.runs.store import default_project

pytestmark = pytest.mark.django_db

CHECKS = {"point_independence", "memoize", "fork_of_fork"}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    command = load_command_class("forklab.runs", "forkcheck")
    code = 0
    try:
        command.run_from_argv(["manage.py", "forkcheck", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def record(scenario: str) -> Any:
    return record_run(project=default_project(), graph=SCENARIOS[scenario].graph(),
                      input=SCENARIOS[scenario].input)


def test_forkcheck_deep_passes_on_recorded_scenarios_and_says_what_it_compared(
        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("research-write", "diamond", "review-loop"):
        record(name)

    code, out, err = cli(capsys, "--deep")

    assert code == 0, out + err
    lines = out.splitlines()
    assert "FAIL" not in out
    assert lines[-1].endswith("metamorphic checks, all hold") or "all hold (" in lines[-1]
    assert any(line.startswith("ok  ") and "point-independence: prompt of 'write'" in line
               for line in lines)
    assert any("null forks checked, all reproduce" in line for line in lines)


def test_forkcheck_deep_json_lists_every_check_of_every_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("diamond")

    code, out, _ = cli(capsys, "--deep", "--run", run.id, "--json")

    data = json.loads(out)
    assert code == 0 and data["ok"] is True
    assert {r["check"] for r in data["deep"]} == CHECKS
    assert all(r["run_id"] == run.id and r["ok"] for r in data["deep"])
    assert all(set(r) == {"run_id", "check", "changes", "compared", "ok", "detail", "skipped"}
               for r in data["deep"])


HIDDEN = {
    "id": "hidden", "start": "tick",
    "nodes": [
        {"id": "tick", "kind": "tool", "tool": "tests.runs.forkcheck_tools.tick",
         "writes": ["n"]},
        {"id": "say", "kind": "agent", "agent": {"model": "scripted-small"}, "reads": ["n"],
         "writes": ["said"], "prompt": "Count {n}"},
    ],
    "edges": [{"from": "tick", "to": "say"}],
}


@override_settings(FORKLAB_TOOL_MODULES=["tests.runs.forkcheck_tools"])
def test_forkcheck_deep_exits_1_and_prints_the_diff_when_a_relation_breaks(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record_run(project=default_project(), graph=parse_graph(HIDDEN), input={})

    code, out, _ = cli(capsys, "--deep", "--run", run.id)

    assert code == 1
    lines = out.splitlines()
    assert "null forks checked, all reproduce" in out  # memoized null forks never re-tick
    failed = [line for line in lines if line.startswith("FAIL")]
    assert failed and "memoize: memory =n" in failed[0]
    assert any(line.startswith("  memory") and "~n" in line for line in lines)
    assert "metamorphic checks, 1 failed" in lines[-1]


@override_settings(FORKLAB_TOOL_MODULES=["tests.runs.forkcheck_tools"])
def test_forkcheck_deep_json_says_not_ok_when_a_relation_breaks(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record_run(project=default_project(), graph=parse_graph(HIDDEN), input={})

    code, out, _ = cli(capsys, "--deep", "--run", run.id, "--json")

    data = json.loads(out)
    assert code == 1 and data["ok"] is False
    broken = [r for r in data["deep"] if not r["ok"]]
    assert broken and broken[0]["detail"]


def test_forkcheck_without_deep_runs_no_metamorphic_check(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("research-write")

    code, out, _ = cli(capsys, "--run", run.id, "--json")

    assert code == 0 and "deep" not in json.loads(out)
