"""The CLI fork verbs (SPEC §4.2): forkpoints, fork, sweep, diff, forkcheck, replay, promote,
cases — their text, their ``--json``, and ``error: <code>: <message>`` with exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import load_command_class
from django.db import connection

from forklab.engine.graph import parse_graph
from forklab.engine.scenarios import SCENARIOS
from forklab.runs.models import Case, Event, GraphVersion, Run
from forklab.runs.services import install_graph, record_run
from forklab.runs.store import default_project

# the sweep forks on threads, which must see the base run: commit, don't wrap in a transaction
pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
FORK_RESULT_KEYS = {
    "base_run_id", "fork_node_id", "changes", "estimate", "incurred_cost_usd",
    "suppressed_effects", "memo_hits", "calls", "diff", "explain",
    # and the variant's Run fields
    "id", "graph", "graph_version", "run_kind", "status", "label", "parent_run_id",
    "fork_sequence_id", "fork_mutations", "fork_group_id", "replay_version", "input",
    "memory", "path", "cost", "created_at", "finished_at", "error",
}


def cli(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> tuple[int, str, str]:
    """Run a command as manage.py does (errors become one line on stderr and exit 1)."""
    command = load_command_class("forklab.runs", name)
    code = 0
    try:
        command.run_from_argv(["manage.py", name, *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> Any:
    code, out, err = cli(capsys, name, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def record(scenario: str, **kwargs: Any) -> Run:
    return record_run(project=default_project(), graph=SCENARIOS[scenario].graph(),
                      input=SCENARIOS[scenario].input, **kwargs)


def fork_json(capsys: pytest.CaptureFixture[str], run_id: str, *args: str) -> dict[str, Any]:
    data: dict[str, Any] = cli_json(capsys, "fork", run_id, *args)
    return data


# -- forkpoints ------------------------------------------------------------------------------


def test_forkpoints_lists_every_node_boundary_with_its_label(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("research-write")
    code, out, _ = cli(capsys, "forkpoints", run.id)
    assert code == 0
    assert out.splitlines() == [
        "seq      1  before 'research' execution 1, iteration 1",
        "seq      6  before 'write' execution 1, iteration 1",
        "seq     11  end of the run, after the last node",
    ]
    points = cli_json(capsys, "forkpoints", run.id)
    assert [p["seq"] for p in points] == [1, 6, 11]
    assert set(points[1]) >= {"seq", "node", "occurrence", "iteration", "kind", "label"}
    assert (points[1]["node"], points[1]["kind"]) == ("write", "before_node")


# -- fork ------------------------------------------------------------------------------------


def test_fork_prints_its_explanation(capsys: pytest.CaptureFixture[str]) -> None:
    run = record("research-write")
    code, out, _ = cli(capsys, "fork", run.id, "--at", "before:write#1",
                       "--prompt", "write=Three bullets.")
    assert code == 0
    fork = Run.objects.get(parent_run=run)
    lines = out.splitlines()
    assert lines[0] == (f"fork {fork.id} of {run.id} at seq 6 "
                        "(before 'write' execution 1, iteration 1)")
    assert "  change    prompt of 'write'" in lines
    assert "  status    completed" in lines
    assert "  path      research → write@fork" in lines


def test_fork_json_is_the_fork_result_with_the_variant_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("research-write")
    data = fork_json(capsys, run.id, "--at", "before:write#1", "--model", "write=scripted-small",
                     "--label", "smaller")
    assert set(data) >= FORK_RESULT_KEYS
    assert (data["base_run_id"], data["fork_node_id"], data["fork_sequence_id"]) == (
        run.id, "write", 6)
    assert (data["run_kind"], data["status"], data["label"]) == (
        "counterfactual", "completed", "smaller")
    assert data["changes"] == [{"kind": "model", "target": "write", "model": "scripted-small",
                               "provider": None}]
    assert [(c["node"], c["model"], c["label"]) for c in data["calls"]] == [
        ("write", "scripted-small", "changed")]  # the tail's calls: 'research' is the prefix
    assert data["incurred_cost_usd"] > 0 and data["estimate"]["live_calls"] == 1
    assert data["explain"].startswith(f"fork {data['id']} of {run.id}")
    assert Run.objects.get(pk=data["id"]).parent_run_id == run.id


def test_a_fork_at_the_end_explains_its_point_without_doubled_parentheses(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("research-write")
    code, out, _ = cli(capsys, "fork", run.id, "--at", "seq:11", "--dry-run")
    assert code == 0
    assert "at seq 11 (end of the run, after the last node)" in out.splitlines()[0]
    assert "((" not in out and "))" not in out


def test_fork_dry_run_estimates_and_records_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    run = record("research-write")
    data = fork_json(capsys, run.id, "--at", "start", "--prompt", "research=Be brief.",
                     "--dry-run")
    assert data["estimate"]["live_calls"] == 2
    assert not Run.objects.filter(parent_run=run).exists()


@pytest.mark.parametrize(("args", "code", "fragment"), [
    (["--at", "before:nope#1"], "fork_point_not_found", "node 'nope' never ran in this run"),
    (["--at", "seq:5"], "fork_point_mid_node",
     "seq 5 is inside the execution of node 'research'"),
    (["--at", "start", "--set", "draft={oops"], "invalid_argument",
     "--set draft is not valid JSON"),
    (["--at", "start", "--output", "write=[1,"], "invalid_argument",
     "--output write is not valid JSON"),
    (["--at", "start", "--side-effects", "sometimes"], "invalid_argument",
     "--side-effects takes replay, block or allow:A,B"),
    (["--at", "start", "--temperature", "write=nan"], "invalid_input",
     "--temperature write: 'nan' is not a finite number"),
    (["--at", "start", "--temperature", "write=3"], "invalid_change",
     "temperature change, field 'temperature'"),
    (["--at", "start", "--model", "write"], "invalid_argument",
     "--model takes T=MODEL (T: a node, a role or a call key), e.g. --model write=MODEL"),
    (["--at", "start", "--set", "draft"], "invalid_argument", "--set takes KEY=JSON"),
    (["--at", "start", "--tool", 'write={"a": 1}'], "invalid_change",
     "'write' is an agent node, not a tool"),
    (["--at", "seq:99"], "fork_point_not_found",
     "list the run's fork points (manage.py forkpoints RUN, or GET /api/v1/runs/RUN/fork-points/)"),
    (["--at", "start", "--max-live-calls", "-1"], "invalid_request",
     "field 'budget.max_live_calls'"),
])
def test_fork_errors_are_one_line_with_their_code_and_exit_1(
        capsys: pytest.CaptureFixture[str], args: list[str], code: str, fragment: str) -> None:
    run = record("research-write")
    status, out, err = cli(capsys, "fork", run.id, *args)
    assert status == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: {code}: ")
    assert fragment in err
    assert not Run.objects.filter(parent_run=run).exists()


def test_a_human_response_setting_a_key_the_gate_does_not_declare_is_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    run = record("order-fulfilment", human_decision="approved")
    changes = tmp_path / "changes.json"
    changes.write_text(json.dumps({"kind": "human_response", "decision": "edited",
                                   "memory_updates": {"note": "gift wrap"}}))
    status, out, err = cli(capsys, "fork", run.id, "--at", "before:approve#1",
                           "--changes", str(changes))
    assert status == 1 and out == ""
    assert err.startswith("error: invalid_overrides: a human_response change answering "
                          "approval gate 'approve' may set only the memory keys")
    assert "memory_updates.note is not declared" in err
    assert not Run.objects.filter(parent_run=run).exists()


@pytest.mark.parametrize(("args", "written"), [
    (["--model", "write=scripted-small", "--model", "write=scripted-large"],
     "node/write/agent/model"),
    (["--set", "draft=1", "--set", "draft=2"], "memory/draft"),
    (["--delete", "notes", "--delete", "notes"], "memory/notes"),
    (["--set", "notes=1", "--delete", "notes"], "memory/notes"),
    (["--input-patch", '{"goal": "a"}', "--input-patch", '{"goal": "b"}'], "memory/goal"),
    (["--human", "approved", "--human", "rejected"], "human"),
])
def test_a_change_given_twice_is_conflicting_changes_not_the_last_one_winning(
        capsys: pytest.CaptureFixture[str], args: list[str], written: str) -> None:
    run = record("research-write")
    status, out, err = cli(capsys, "fork", run.id, "--at", "start", *args)
    assert status == 1 and out == ""
    assert err.startswith(f"error: conflicting_changes: two changes write the same thing "
                          f"({written}): "), err
    assert not Run.objects.filter(parent_run=run).exists()


def test_flags_on_different_keys_combine(capsys: pytest.CaptureFixture[str]) -> None:
    run = record("research-write")
    data = fork_json(capsys, run.id, "--at", "start", "--set", "a=1", "--set", "b=2",
                     "--input-patch", '{"goal": "x"}', "--input-patch", '{"more": "y"}',
                     "--dry-run")
    assert data["changes"] == [{"kind": "memory", "set": {"a": 1, "b": 2}, "delete": []},
                               {"kind": "input_patch", "patch": {"goal": "x"}},
                               {"kind": "input_patch", "patch": {"more": "y"}}]


def test_fork_of_an_unknown_run_says_how_to_list_runs(
        capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = cli(capsys, "fork", "nope", "--at", "start")
    assert status == 1
    assert err == "error: not_found: no run 'nope'; list runs with: forklab runs\n"


def test_a_fork_from_a_real_process_keeps_stdout_json_and_logs_on_stderr() -> None:
    run = record("research-write")
    database = connection.settings_dict["NAME"]  # pytest-django's test database file
    result = subprocess.run(
        [sys.executable, "manage.py", "fork", run.id, "--at", "before:write#1",
         "--temperature", "write=0.9", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "DATABASE_URL": f"sqlite:///{database}",
             "FORKLAB_LOG_LEVEL": "INFO", "FORKLAB_LOG_FORMAT": "json"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["base_run_id"] == run.id  # nothing else on stdout
    logs = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    [started] = [x for x in logs if x["event"] == "replay.fork.fork_started"]
    assert (started["base_run_id"], started["fork_sequence_id"], started["fork_node_id"]) == (
        run.id, 6, "write")


# -- sweep -----------------------------------------------------------------------------------


def variants(*names: str) -> list[str]:
    args = []
    for name in names:
        change = {"kind": "prompt", "target": "left", "system_prompt": f"Answer as {name}."}
        args += ["--variant", f"{name}={json.dumps(change)}"]
    return args


def test_sweep_estimate_predicts_each_variant_and_starts_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("diamond")
    code, out, _ = cli(capsys, "sweep", run.id, "--at", "start", *variants("pirate", "poet"),
                       "--estimate")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("pirate: ") and lines[1].startswith("poet: ")
    assert "live calls" in lines[0] and lines[-1].startswith("total $")
    assert not Run.objects.filter(parent_run=run).exists()


def test_sweep_forks_once_per_variant_in_one_group(capsys: pytest.CaptureFixture[str]) -> None:
    run = record("diamond")
    data = cli_json(capsys, "sweep", run.id, "--at", "start", *variants("pirate", "poet"),
                    "--concurrency", "2")
    forks = Run.objects.filter(parent_run=run)
    assert sorted(forks.values_list("label", flat=True)) == ["pirate", "poet"]
    assert set(forks.values_list("fork_group_id", flat=True)) == {data["fork_group_id"]}
    assert set(forks.values_list("status", flat=True)) == {"completed"}


def test_a_sweep_with_a_failed_variant_exits_1_naming_it_and_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("flaky-tool")  # its lookup times out in region eu-west
    fixed = {"kind": "input_patch", "patch": {"region": "us-east"}}
    still = {"kind": "prompt", "target": "plan", "system_prompt": "Plan it twice."}
    unpriced = {"kind": "model", "target": "plan", "model": "no-such-model"}
    args = ["--at", "start", "--variant", f"fixed={json.dumps(fixed)}",
            "--variant", f"still={json.dumps(still)}", "--variant", f"odd={json.dumps(unpriced)}"]
    code, out, _ = cli(capsys, "sweep", run.id, *args)
    assert code == 1
    assert out.splitlines()[-1] == (
        "2 of 3 variant(s) failed: still: its run failed at node 'fetch_inventory' "
        "(node_failed); odd: not forked (unpriced_model)")
    code, out, _ = cli(capsys, "sweep", run.id, *args, "--json")
    variants = json.loads(out)["variants"]
    assert code == 1
    assert {n: v["status"] for n, v in variants.items()} == {
        "fixed": "completed", "still": "failed", "odd": "error"}


def test_sweep_with_a_malformed_variant_is_an_argument_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("diamond")
    status, _, err = cli(capsys, "sweep", run.id, "--at", "start", "--variant", "odd")
    assert status == 1 and err.startswith(
        "error: invalid_argument: --variant takes NAME=CHANGES_JSON (a change or a JSON list of "
        "changes), e.g. --variant terse='{\"kind\": \"prompt\", ")


def test_sweep_refuses_a_variant_name_given_twice(capsys: pytest.CaptureFixture[str]) -> None:
    run = record("diamond")
    status, _, err = cli(capsys, "sweep", run.id, "--at", "start", *variants("poet", "poet"))
    assert status == 1 and err.startswith(
        "error: invalid_argument: --variant 'poet' is given twice; give each variant its own name")
    assert not Run.objects.filter(parent_run=run).exists()


def test_sweep_help_says_what_a_variant_is(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "sweep", "--help")
    assert code == 0
    assert "one change or a JSON list of changes" in " ".join(out.split())


# -- diff ------------------------------------------------------------------------------------


def test_diff_prints_the_diff_block_and_json_is_the_run_diff(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("diamond")
    fork = fork_json(capsys, run.id, "--at", "start", "--prompt", "left=Be brief.")
    code, out, _ = cli(capsys, "diff", run.id, fork["id"])
    assert code == 0
    assert out.splitlines()[0] == f"diff {run.id} → {fork['id']}"
    assert "  path      plan → left@fork → right → join@fork" in out
    data = cli_json(capsys, "diff", run.id, fork["id"])
    assert set(data) >= {"divergence", "path", "memory", "terminal", "cost"}
    assert data["memory"]["left"]["op"] == "changed"


# -- forkcheck -------------------------------------------------------------------------------


def test_forkcheck_passes_on_the_demo_data(capsys: pytest.CaptureFixture[str]) -> None:
    cli_json(capsys, "demo")
    code, out, _ = cli(capsys, "forkcheck")
    assert code == 0
    assert out.splitlines()[-1].endswith("null forks checked, all reproduce")
    assert "FAIL" not in out


def test_forkcheck_fails_on_a_run_whose_log_was_edited(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("research-write")
    # the write node's recorded fingerprint and request no longer match what it read and
    # sent: its recording cannot be served, so the null fork pays a live call and fails
    for type_, field in (("node.started", "fingerprint"), ("agent.responded", "request_hash")):
        edited = Event.objects.get(run=run, type=type_, node="write")
        edited.payload = {**edited.payload, field: "0" * 32}
        edited.save(update_fields=["payload"])
    code, out, _ = cli(capsys, "forkcheck", "--run", run.id)
    assert code == 1
    assert out.splitlines()[0].startswith("FAIL")
    assert "paid call(s): write:agent:changed" in out
    assert out.splitlines()[-1].endswith("1 mismatch")


@pytest.mark.parametrize("given", ["--run", "positional"])
def test_forkcheck_json_lists_each_null_fork(capsys: pytest.CaptureFixture[str],
                                             given: str) -> None:
    run = record("research-write")
    args = ["--run", run.id] if given == "--run" else [run.id]
    data = cli_json(capsys, "forkcheck", *args)
    assert data["ok"] is True
    assert [r["point"]["seq"] for r in data["results"]] == [1, 6, 11]


def test_forkcheck_given_two_different_runs_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("research-write")
    code, _, err = cli(capsys, "forkcheck", run.id, "--run", "another")
    assert code == 1 and err.startswith("error: invalid_argument: two runs given")


def test_forkcheck_of_a_fork_null_forks_its_own_points_and_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("research-write")
    fork = fork_json(capsys, run.id, "--at", "before:write#1", "--prompt", "write=Be brief.")
    own = [p["seq"] for p in cli_json(capsys, "forkpoints", fork["id"])
           if p["run_id"] == fork["id"]]
    code, out, err = cli(capsys, "forkcheck", "--run", fork["id"], "--deep")
    assert code == 0, err
    assert "is a fork: checked at its own points" in out and f"--run {run.id}" in out
    assert f"{len(own)} null forks checked, all reproduce" in out
    assert "FAIL" not in out and "metamorphic checks, all hold" in out.splitlines()[-1]
    data = cli_json(capsys, "forkcheck", "--run", fork["id"])
    assert data["ok"] is True and [r["point"]["seq"] for r in data["results"]] == own


# -- replay ----------------------------------------------------------------------------------


def test_replay_strict_reproduces_an_unchanged_graph(capsys: pytest.CaptureFixture[str]) -> None:
    run = record("research-write")
    code, out, _ = cli(capsys, "replay", run.id, "--strict")
    assert code == 0
    assert out.strip() == f"replayed {run.id}: {run.last_seq} events, completed, no divergence"


def test_replay_strict_after_the_graph_changed_is_a_replay_divergence(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("research-write")
    wire = SCENARIOS["research-write"].graph().to_wire()
    wire["agents"]["writer"]["system_prompt"] = "Be terse."
    assert install_graph(project=default_project(), graph=parse_graph(wire)).version == 2
    code, out, err = cli(capsys, "replay", run.id, "--strict")
    assert code == 1 and out == ""
    assert err.startswith("error: replay_divergence: replay diverged at seq 7: ")
    assert "fingerprint" in err and err.count("\n") == 1


# -- promote ---------------------------------------------------------------------------------


def test_promote_adopts_a_forks_prompt_as_a_new_graph_version(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("diamond")
    fork = fork_json(capsys, run.id, "--at", "start", "--prompt", "left=Be brief.")
    code, out, _ = cli(capsys, "promote", fork["id"])
    assert code == 0
    assert out.strip() == "graph diamond version 2 (from version 1) with 1 change(s)"
    versions = {v.version: json.dumps(v.spec) for v in
                GraphVersion.objects.filter(graph__graph_id="diamond")}
    assert "Be brief." in versions[2] and "Be brief." not in versions[1]


def test_promote_of_a_primary_run_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    run = record("diamond")
    code, _, err = cli(capsys, "promote", run.id)
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1


# -- cases -----------------------------------------------------------------------------------


def test_cases_save_then_run_passes_and_a_broken_criterion_fails(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("diamond")
    fork = fork_json(capsys, run.id, "--at", "start", "--prompt", "left=Be brief.")
    code, out, _ = cli(capsys, "cases", "save", fork["id"], "--name", "brief",
                       "--criteria", '[{"key": "plan", "op": "exists"}]')
    assert code == 0 and out.strip() == f"saved case 'brief' from fork {fork['id']}"
    assert Case.objects.get(name="brief").source_run_id == fork["id"]
    code, out, _ = cli(capsys, "cases", "run")
    assert code == 0 and out.splitlines() == [
        "pass  default/brief  (graph diamond version 1)", "1 passed, 0 failed"]

    cli(capsys, "cases", "save", fork["id"], "--name", "impossible",
        "--criteria", '[{"key": "plan", "op": "eq", "value": "nope"}]')
    code, out, _ = cli(capsys, "cases", "run")
    assert code == 1
    assert "FAIL  default/impossible" in out and "plan eq 'nope' does not hold" in out
    assert out.splitlines()[-1] == "1 passed, 1 failed"
    data = json.loads(cli(capsys, "cases", "run", "--json")[1])
    assert data["failed"] == 1 and [r["passed"] for r in data["results"]] == [True, False]


def test_cases_run_against_the_graph_s_current_version_unless_a_version_is_named(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A regression suite fails when a graph edit breaks a case (issue 35, class 2)."""
    run = record("diamond")
    fork = fork_json(capsys, run.id, "--at", "start", "--prompt", "left=Be brief.")
    cli(capsys, "cases", "save", fork["id"], "--name", "brief",
        "--criteria", '[{"key": "left", "op": "exists"}]')
    data = SCENARIOS["diamond"].graph().to_wire()
    for node in data["nodes"]:
        if node["id"] == "left":
            node["writes"] = ["part_a"]
        if node["id"] == "join":
            node["reads"] = ["part_a", "right"]
            node["prompt"] = "Combine {part_a} and {right}"
    install_graph(project=default_project(), graph=parse_graph(data))

    code, out, _ = cli(capsys, "cases", "run")
    assert code == 1
    assert out.splitlines()[0] == "FAIL  default/brief  (graph diamond version 2)"
    assert "left exists None does not hold" in out
    code, out, _ = cli(capsys, "cases", "run", "--graph-version", "1")
    assert code == 0 and out.splitlines()[0] == "pass  default/brief  (graph diamond version 1)"
    data = json.loads(cli(capsys, "cases", "run", "--json")[1])
    assert [(r["graph_id"], r["graph_version"]) for r in data["results"]] == [("diamond", 2)]


def test_a_case_without_criteria_says_it_cannot_fail(capsys: pytest.CaptureFixture[str]) -> None:
    run = record("diamond")
    fork = fork_json(capsys, run.id, "--at", "start", "--prompt", "left=Be brief.")
    code, out, _ = cli(capsys, "cases", "save", fork["id"], "--name", "bare")
    assert code == 0 and out.strip() == (
        f"saved case 'bare' from fork {fork['id']} (no criteria: this case cannot fail; add "
        "criteria to make it a check)")


# -- failed forks ----------------------------------------------------------------------------


def test_a_failed_forks_explanation_says_which_node_failed_and_what_to_try(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("flaky-tool")  # its lookup times out in region eu-west
    code, out, _ = cli(capsys, "fork", run.id, "--at", "start", "--prompt", "plan=Plan twice.")
    assert code == 0
    lines = out.splitlines()
    assert lines[2:4] == [
        "  status    failed",
        "  error     node 'fetch_inventory' failed with TimeoutError: upstream inventory "
        "service timed out after 30s (region eu-west); fork at 'failure' with a change to "
        "that node to try it another way"]


def never_ran(base: Run) -> Run:
    """A fork whose request no longer fitted when its task ran: failed, no event recorded."""
    from forklab.runs.execution import fail
    from forklab.runs.store import DjangoStore

    fork = Run.objects.create(
        id=f"notrun-{base.id[:20]}", project=base.project, graph_version=base.graph_version,
        graph_slug=base.graph_slug, run_kind="counterfactual", parent_run=base,
        fork_mutations=[{"kind": "prompt", "target": "plan", "system_prompt": "x"}])
    fail(fork, DjangoStore(base.project), "source_missing", "the base's events are gone")
    return fork


@pytest.mark.parametrize("command", [
    ["cases", "save", "FORK", "--name", "never"], ["diff", "BASE", "FORK"], ["promote", "FORK"],
    ["replay", "FORK", "--strict"], ["forkpoints", "FORK"], ["forkcheck", "--run", "FORK"],
    ["fork", "FORK", "--at", "start"],
])
def test_a_fork_that_never_ran_is_refused_saying_why_not_misread_as_a_primary_run(
        capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    base = record("flaky-tool")
    fork = never_ran(base)
    args = [{"FORK": fork.id, "BASE": base.id}.get(a, a) for a in command]
    code, out, err = cli(capsys, *args)
    assert code == 1 and out == ""
    assert err == (f"error: invalid_run_state: run {fork.id!r} never ran (source_missing: the "
                   "base's events are gone); it recorded no events, so it has no result, case, "
                   f"diff or fork points; fork its base {base.id!r} again\n")
    assert not Case.objects.exists()


def test_cases_refuse_a_duplicate_name_with_the_apis_case_exists(
        capsys: pytest.CaptureFixture[str]) -> None:
    run = record("diamond")
    fork = fork_json(capsys, run.id, "--at", "start", "--prompt", "left=Be brief.")
    assert cli(capsys, "cases", "save", fork["id"], "--name", "once")[0] == 0
    code, _, err = cli(capsys, "cases", "save", fork["id"], "--name", "once", "--json")
    assert code == 1
    assert err == ("error: case_exists: project 'default' already has a case named 'once'; "
                   "choose another name\n")
    assert Case.objects.filter(project__slug="default").count() == 1


def test_cases_refuse_a_bad_criterion_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI validates criteria as the API does (the engine's Condition), before saving."""
    run = record("diamond")
    fork = fork_json(capsys, run.id, "--at", "start", "--prompt", "left=Be brief.")
    code, _, err = cli(capsys, "cases", "save", fork["id"], "--name", "odd",
                       "--criteria", '[{"key": "plan", "op": "like"}]')
    assert code == 1 and err.startswith("error: invalid_request: field 'criteria[0].op'")
    assert not Case.objects.filter(name="odd").exists()
