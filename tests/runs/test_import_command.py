"""``forklab import FILE``: an OTLP JSON trace export as runs (SPEC §8)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command, load_command_class
from google.protobuf.json_format import MessageToDict

from forklab.runs.models import Run
from tests.traces.spans import handmade

pytestmark = pytest.mark.django_db


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


@pytest.mark.parametrize("verb", [("fork", "--at", "before:weather_agent"), ("replay",),
                                  ("forkcheck",),
                                  ("sweep", "--at", "before:weather_agent", "--variant",
                                   'a={"kind": "model", "target": "weather_agent", '
                                   '"model": "gpt-4o"}')])
def test_commands_that_execute_a_run_refuse_an_imported_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: tuple[str, ...]) -> None:
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(MessageToDict(handmade()[0])))
    (run_id,) = _import(str(path))["runs"]  # type: ignore[misc]
    command = load_command_class("forklab.runs", verb[0])
    with pytest.raises(SystemExit):
        command.run_from_argv(["manage.py", verb[0], run_id, *verb[1:]])
    assert capsys.readouterr().err.startswith("error: imported_run: ")


def test_forkcheck_leaves_imported_runs_out(tmp_path: Path) -> None:
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(MessageToDict(handmade()[0])))
    _import(str(path))
    out = StringIO()
    call_command("forkcheck", "--json", stdout=out)
    assert json.loads(out.getvalue())["results"] == []
