"""Management commands: demo, record, runs (SPEC §4.2)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command, load_command_class

from forklab.engine.errors import ForklabError
from forklab.engine.scenarios import SCENARIOS
from forklab.runs.models import Membership, Run

pytestmark = pytest.mark.django_db

RUN_KEYS = {
    "id", "graph", "graph_version", "run_kind", "status", "label", "parent_run_id",
    "fork_sequence_id", "fork_mutations", "fork_group_id", "replay_version", "input",
    "memory", "path", "cost", "created_at", "finished_at", "error",
}


def run_command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def run_cli(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> tuple[int, str, str]:
    """Run a command the way manage.py does (so errors are formatted, not raised)."""
    command = load_command_class("forklab.runs", name)
    code = 0
    try:
        command.run_from_argv(["manage.py", name, *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_demo_records_one_run_of_every_scenario_and_creates_the_demo_login() -> None:
    data = json.loads(run_command("demo", "--json"))
    assert data["project"] == "demo"
    assert sorted(data["recorded"]) == sorted(SCENARIOS)
    runs = Run.objects.filter(project__slug="demo")
    assert sorted(runs.values_list("graph_slug", flat=True)) == sorted(SCENARIOS)
    statuses = dict(runs.values_list("graph_slug", "status"))
    assert statuses["flaky-tool"] == "failed"
    assert statuses["order-fulfilment"] == "completed"  # its approval gate was answered
    assert {s for name, s in statuses.items() if name != "flaky-tool"} == {"completed"}
    assert set(data["runs"]["diamond"]) >= RUN_KEYS

    user = get_user_model().objects.get(username="demo")
    assert user.check_password("demo") and not user.is_superuser
    assert Membership.objects.get(user=user, project__slug="demo").role == "admin"


def test_demo_twice_records_nothing_new() -> None:
    run_command("demo")
    before = set(Run.objects.values_list("id", flat=True))
    data = json.loads(run_command("demo", "--json"))
    assert data["recorded"] == []
    assert sorted(data["existing"]) == sorted(SCENARIOS)
    assert set(Run.objects.values_list("id", flat=True)) == before


def test_record_prints_the_new_run_id() -> None:
    out = run_command("record", "research-write", "--label", "first")
    run = Run.objects.get(pk=out.strip())
    assert (run.graph_slug, run.label, run.status) == ("research-write", "first", "completed")
    assert run.input == SCENARIOS["research-write"].input
    assert run.project.slug == "default"


def test_record_json_is_the_run_shape() -> None:
    data = json.loads(run_command("record", "diamond", "--input", '{"task": "Plan a picnic"}',
                                  "--json"))
    assert set(data) >= RUN_KEYS
    assert data["input"] == {"task": "Plan a picnic"}
    assert data["run_kind"] == "primary" and data["status"] == "completed"
    assert data["cost"]["input_tokens"] > 0 and data["cost"]["usd"] > 0
    assert data["path"][0]["node"] == "plan"


def test_record_without_an_answer_pauses_at_the_approval_gate() -> None:
    paused = json.loads(run_command("record", "order-fulfilment", "--json"))
    assert paused["status"] == "paused"
    answered = json.loads(run_command("record", "order-fulfilment", "--answer", "approved",
                                      "--json"))
    assert answered["status"] == "completed"


def test_record_accepts_a_graph_file(tmp_path: Path) -> None:
    graph = tmp_path / "hello.json"
    graph.write_text(json.dumps({
        "id": "hello", "start": "greet",
        "nodes": [{"id": "greet", "kind": "agent", "agent": {"model": "scripted-small"},
                   "reads": ["name"], "writes": ["greeting"], "prompt": "Greet {name}"}],
    }))
    data = json.loads(run_command("record", str(graph), "--input", '{"name": "Ada"}', "--json"))
    assert (data["graph"], data["status"]) == ("hello", "completed")
    assert "greeting" in data["memory"]


@pytest.mark.parametrize(("args", "code", "fragment"), [
    (["nope"], "not_found", "neither a scenario nor a graph file"),
    (["missing.yaml"], "not_found", "does not exist"),
    (["diamond", "--input", "{oops"], "invalid_argument", "not valid JSON"),
    (["diamond", "--input", "[1]"], "invalid_argument", "must be a JSON object"),
    (["diamond", "--project", "elsewhere"], "not_found", "no project 'elsewhere'"),
])
def test_record_errors_are_one_line_with_a_code(
    capsys: pytest.CaptureFixture[str], args: list[str], code: str, fragment: str,
) -> None:
    status, out, err = run_cli(capsys, "record", *args)
    assert status == 1
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: {code}: ")
    assert fragment in err
    assert "Traceback" not in err


def test_record_names_the_node_and_field_of_an_invalid_graph_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    graph = tmp_path / "broken.yaml"
    graph.write_text("id: broken\nstart: a\nnodes:\n  - {id: a, kind: agent, reads: 3}\n")
    status, _, err = run_cli(capsys, "record", str(graph))
    assert status == 1
    assert err.startswith("error: invalid_graph: ") and "node 'a'" in err


def test_errors_propagate_as_exceptions_through_call_command() -> None:
    with pytest.raises(ForklabError) as info:
        call_command("record", "nope")
    assert info.value.code == "not_found"


def test_runs_lists_newest_first_and_filters() -> None:
    first = run_command("record", "research-write").strip()
    second = run_command("record", "flaky-tool").strip()
    listed = json.loads(run_command("runs", "--json"))
    assert [r["id"] for r in listed] == [second, first]
    assert all(set(r) >= RUN_KEYS for r in listed)
    failed = json.loads(run_command("runs", "--status", "failed", "--json"))
    assert [r["id"] for r in failed] == [second]
    assert failed[0]["error"]["node"]
    assert json.loads(run_command("runs", "--kind", "counterfactual", "--json")) == []


def test_runs_prints_a_table() -> None:
    run_id = run_command("record", "diamond").strip()
    lines = run_command("runs").splitlines()
    assert lines[0].split()[:4] == ["ID", "GRAPH", "KIND", "STATUS"]
    assert lines[1].split()[:4] == [run_id, "diamond@1", "primary", "completed"]


@pytest.mark.parametrize(("args", "fragment"), [
    (["--kind", "weird"], "unknown kind 'weird'"),
    (["--status", "done"], "unknown status 'done'"),
])
def test_runs_rejects_unknown_filter_values(
    capsys: pytest.CaptureFixture[str], args: list[str], fragment: str,
) -> None:
    status, _, err = run_cli(capsys, "runs", *args)
    assert status == 1 and err.startswith("error: invalid_argument: ") and fragment in err


def test_every_command_has_a_json_flag() -> None:
    for name in ("demo", "record", "runs"):
        parser: Any = load_command_class("forklab.runs", name).create_parser("manage.py", name)
        assert "--json" in parser.format_help()
