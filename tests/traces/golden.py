"""Golden traces: OTLP JSON exports captured once from the real instrumentations (the
vendor stub, the tool conversation of ``spans.py``) and the events forklab maps them to,
checked in next to the tests (``golden/``). A change to the mapping shows up as a diff of
a golden log; regenerate both on purpose with ``python -m tests.traces.golden``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict

from forklab.engine.traces import map_trace, read_otlp_json

HERE = Path(__file__).parent / "golden"
CASES = ("genai", "openinference")


def mapped(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of the document's one trace, in wire form."""
    spans, rejected = read_otlp_json(document)
    assert not rejected
    return [e.to_wire() for e in map_trace(spans, run_id="golden").events]


def load(case: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    trace = json.loads((HERE / f"{case}.otlp.json").read_text())
    events = json.loads((HERE / f"{case}.events.json").read_text())
    return trace, events


def regenerate() -> None:  # pragma: no cover - run by hand
    from tests.traces.spans import GENAI_CONTENT, traced
    from tests.vendor_stub import VendorStub

    with VendorStub() as stub:
        for case in CASES:
            env = GENAI_CONTENT if case == "genai" else {}
            document = MessageToDict(traced(stub, case, env)[0])
            (HERE / f"{case}.otlp.json").write_text(json.dumps(document, indent=1) + "\n")
            (HERE / f"{case}.events.json").write_text(
                json.dumps(mapped(document), indent=1) + "\n")


if __name__ == "__main__":  # pragma: no cover
    regenerate()
