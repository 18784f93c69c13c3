"""``forklab import FILE``: an OTLP JSON trace export as runs (SPEC §8)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command, load_command_class
from google.protobuf.json_format import MessageToDict

from forklab.runs.models import Event, Run
from tests.traces.spans import handmade
from tests.vendor_stub import VendorStub
from tests.vendor_stub.fixtures import server, stub

__all__ = ["server", "stub"]  # the vendor stub fixtures, for this module

pytestmark = pytest.mark.django_db
KEY = "weather_agent#1/turn:1"


def _import(*args: str) -> dict[str, object]:
    out = StringIO()
    call_command("import", *args, "--json", stdout=out)
    loaded: dict[str, object] = json.loads(out.getvalue())
    return loaded


def test_import_reads_a_file_into_one_run_per_trace_and_again_changes_nothing(
        tmp_path: Path) -> None:
    request, _ = handmade(unmappable=True)
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(MessageToDict(request)))
    first = _import(str(path))
    assert first["rejected_spans"] == 1
    assert first["error_message"] == "a chat span without gen_ai.request.model"
    (run_id,) = first["runs"]  # type: ignore[misc]
    run = Run.objects.get(pk=run_id)
    assert run.project.slug == "default" and run.status == "completed"
    assert run.trace_id == request.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    assert _import(str(path))["runs"] == [run_id]
    assert Run.objects.filter(trace_id=run.trace_id).count() == 1
    out = StringIO()
    call_command("runs", "--trace-id", run.trace_id, "--json", stdout=out)
    assert [r["id"] for r in json.loads(out.getvalue())] == [run_id]


def test_a_file_per_line_export_is_read_too(tmp_path: Path) -> None:
    early, late = handmade(late=True)
    path = tmp_path / "traces.jsonl"
    path.write_text("\n".join(json.dumps(MessageToDict(r)) for r in (early, late)))
    (run_id,) = _import(str(path))["runs"]  # type: ignore[misc]
    assert Run.objects.get(pk=run_id).input_tokens == 40  # both turns


def test_a_file_that_is_not_otlp_is_one_error_line(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"resourceSpans": 1}')
    command = load_command_class("forklab.runs", "import")
    with pytest.raises(SystemExit) as exit_:
        command.run_from_argv(["manage.py", "import", str(path)])
    assert exit_.value.code == 1
    assert capsys.readouterr().err.startswith("error: invalid_otlp: expected an OTLP trace")


def test_export_writes_what_import_reads_back(tmp_path: Path) -> None:
    request, _ = handmade()
    source = tmp_path / "in.json"
    source.write_text(json.dumps(MessageToDict(request)))
    (run_id,) = _import(str(source))["runs"]  # type: ignore[misc]
    out = tmp_path / "out.json"
    call_command("export", run_id, "--output", str(out), stdout=StringIO())
    document = json.loads(out.read_text())
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert [s["name"] for s in spans] == ["weather agent", "weather_agent", "chat gpt-4o-mini"]
    (again,) = _import(str(out))["runs"]  # type: ignore[misc]
    assert again != run_id  # forklab's rendition is a trace of its own
    original, copy = Run.objects.get(pk=run_id), Run.objects.get(pk=again)
    assert (copy.memory, copy.input_tokens, copy.status) == (
        original.memory, original.input_tokens, original.status)


def test_import_reads_a_langfuse_trace_export(tmp_path: Path) -> None:
    from tests.traces.test_langfuse import export

    path = tmp_path / "langfuse.json"
    path.write_text(json.dumps({"data": [export()]}))
    data = _import(str(path))
    assert data["rejected_spans"] == 1  # its EVENT observation
    (run_id,) = data["runs"]  # type: ignore[misc]
    run = Run.objects.get(pk=run_id)
    assert (run.label, run.conversation_id, run.input_tokens) == ("support", "s-1", 80)


def _imported_run(tmp_path: Path) -> str:
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(MessageToDict(handmade()[0])))
    (run_id,) = _import(str(path))["runs"]  # type: ignore[misc]
    return str(run_id)


def _refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    command = load_command_class("forklab.runs", argv[0])
    with pytest.raises(SystemExit):
        command.run_from_argv(["manage.py", *argv])
    said = capsys.readouterr()  # a sweep reports a variant's error on stdout, exits 1
    return said.err + said.out


@pytest.mark.parametrize("verb", [("replay",), ("forkcheck",)])
def test_commands_that_re_execute_a_whole_run_refuse_an_imported_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: tuple[str, ...]) -> None:
    err = _refusal(capsys, verb[0], _imported_run(tmp_path), *verb[1:])
    assert err.startswith("error: imported_run: ")
    assert "fork one of its replayable model calls" in err


@pytest.mark.parametrize("verb", [
    ("fork", "--at", "before:weather_agent"),
    ("sweep", "--at", "before:weather_agent", "--variant",
     'a={"kind": "model", "target": "weather_agent", "model": "gpt-4o"}')])
def test_a_fork_or_sweep_of_an_imported_run_at_a_node_says_what_is_possible(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], settings: Any,
        verb: tuple[str, ...]) -> None:
    settings.FORKLAB_TRACE_SETTLE_S = 0
    said = _refusal(capsys, verb[0], _imported_run(tmp_path), *verb[1:])
    assert "one_call_only: " in said and "before_call" in said


def test_a_fork_of_a_trace_still_arriving_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refusal(capsys, "fork", _imported_run(tmp_path), "--at",
                   "before:weather_agent#1/turn:1")
    assert err.startswith("error: trace_arriving: ") and "retry in" in err


def test_fork_re_asks_one_imported_call_with_a_messages_change(
        tmp_path: Path, settings: Any, stub: VendorStub) -> None:
    settings.FORKLAB_TRACE_SETTLE_S = 0
    settings.FORKLAB_OPENAI_BASE_URL = stub.openai_base_url
    run_id = _imported_run(tmp_path)
    out = StringIO()
    call_command("fork", run_id, "--at", f"before:{KEY}", "--messages",
                 f'{KEY}=[{{"role": "user", "content": "Weather in Lyon?"}}]', "--json",
                 stdout=out)
    data = json.loads(out.getvalue())
    assert data["status"] == "completed" and data["diff"]["path"]["one_call"] == KEY
    assert [(c["call"], c["label"]) for c in data["calls"]] == [(KEY, "changed")]
    replies = [e.payload["text"] for e in Event.objects.filter(
        run_id=data["run_id"], type="agent.responded")]
    assert replies == ["You said: Weather in Lyon?"]


@pytest.mark.django_db(transaction=True)  # the sweep's threads write the database
def test_sweep_asks_one_imported_call_of_two_models(
        tmp_path: Path, settings: Any, stub: VendorStub) -> None:
    settings.FORKLAB_TRACE_SETTLE_S = 0
    settings.FORKLAB_OPENAI_BASE_URL = stub.openai_base_url
    run_id = _imported_run(tmp_path)
    out = StringIO()
    call_command("sweep", run_id, "--at", f"before:{KEY}", "--json", "--concurrency", "1", *[
        arg for model in ("gpt-4.1", "gpt-4o") for arg in (
            "--variant", f'{model}={{"kind": "model", "call": "{KEY}", "model": "{model}"}}')],
        stdout=out)
    variants = json.loads(out.getvalue())["variants"]
    assert {name: v["status"] for name, v in variants.items()} == {
        "gpt-4.1": "completed", "gpt-4o": "completed"}
    assert sorted(b["model"] for b in stub.bodies("openai")) == ["gpt-4.1", "gpt-4o"]


def test_forkcheck_leaves_imported_runs_out(tmp_path: Path) -> None:
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(MessageToDict(handmade()[0])))
    _import(str(path))
    out = StringIO()
    call_command("forkcheck", "--json", stdout=out)
    assert json.loads(out.getvalue())["results"] == []
