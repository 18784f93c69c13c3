from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import CommandParser

from forklab.engine import inputs
from forklab.engine.traces import OtlpDecodeError
from forklab.runs.errors import NotFound
from forklab.runs.management.base import ForklabCommand
from forklab.runs.services import project_for_recording
from forklab.runs.store import DEFAULT_PROJECT_SLUG
from forklab.runs.traces import import_document


class Command(ForklabCommand):
    help = ("Import an OTLP JSON trace export (what an OpenTelemetry file exporter writes) "
            "or a Langfuse trace export as runs, one per trace; prints the run ids (SPEC §8).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="path/to/traces.json (an ExportTraceServiceRequest, "
                                         "or one per line; or a Langfuse trace export)")
        parser.add_argument("--project", default=DEFAULT_PROJECT_SLUG,
                            help="project slug (default: %(default)s)")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        if not path.is_file():
            raise NotFound(f"trace file {options['file']!r} does not exist", path=str(path))
        project = project_for_recording(options["project"])
        text = path.read_bytes()
        inputs.check_json_text(text, where=f"trace file {path}", max_bytes=inputs.MAX_GRAPH_BYTES)
        runs: list[str] = []
        rejected, messages = 0, []
        for document in _documents(text.decode("utf-8")):
            result = import_document(user=None, project=project, data=document)
            runs += [r for r in result.runs if r not in runs]
            rejected += len(result.rejected)
            if result.error_message:
                messages.append(result.error_message)
        data = {"runs": runs, "rejected_spans": rejected, "error_message": "; ".join(messages)}
        text_out = "\n".join(runs) + (f"\n{rejected} span(s) not mapped: {data['error_message']}"
                                      if rejected else "")
        self.out(options, data, text_out)


def _documents(text: str) -> list[Any]:
    """One JSON export, or one per line (what the collector's file exporter writes)."""
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise OtlpDecodeError(f"the file is not OTLP JSON: {exc}") from None
