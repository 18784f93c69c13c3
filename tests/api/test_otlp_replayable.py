"""Every call of an imported run says whether it is replayable (SPEC §8), on every JSON
surface: the Run JSON (``GET /runs/{id}/``, the runs list, ``forklab runs --json``) and
the conversation's turns and tool calls — with what is missing and the setting that
captures it when it is inspect-only; runs not imported say ``imported: null``."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command

from forklab.engine.traces import genai
from forklab.runs.traces import import_spans
from tests.api.conftest import API, World
from tests.traces.test_mapping import mixed_capture

pytestmark = pytest.mark.django_db

TRACE = "feedface" * 4
INSPECT = {"replayable": False, "missing": ["request messages", "reply"],
           "capture_hint": genai.CAPTURE_HINT}


@pytest.fixture
def imported(world: World) -> str:
    result = import_spans(user=None, project=world.lab, spans=mixed_capture(TRACE),
                          unreadable=[])
    (run_id,) = result.runs
    return run_id


def _calls(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: c[k] for k in ("call", "replayable", "missing", "capture_hint") if k in c}
            for c in run["imported"]["calls"]]


EXPECTED = [
    {"call": "researcher#1/turn:1", "replayable": True},
    {"call": "researcher#1/turn:1/tool:1", "replayable": False, "missing": ["tool result"],
     "capture_hint": genai.CAPTURE_HINT},
    {"call": "researcher#1/turn:2", **INSPECT},
]


def test_the_run_json_lists_each_call_with_whether_it_is_replayable(
        world: World, imported: str) -> None:
    run = world.client("viewer").get(f"{API}/runs/{imported}/").json()
    assert run["imported"]["trace_id"] == TRACE and run["imported"]["spans"] == 4
    assert _calls(run) == EXPECTED
    (listed,) = world.client("viewer").get(f"{API}/runs/?trace_id={TRACE}").json()["results"]
    assert _calls(listed) == EXPECTED
    recorded = world.client("viewer").get(f"{API}/runs/{world.lab_diamond}/").json()
    assert recorded["imported"] is None


def test_the_cli_json_says_it_too(world: World, imported: str) -> None:
    out = io.StringIO()
    call_command("runs", "--json", "--trace-id", TRACE, stdout=out)
    (run,) = json.loads(out.getvalue())
    assert _calls(run) == EXPECTED


def test_the_conversation_marks_each_turn_and_tool_call(world: World, imported: str) -> None:
    thread = world.client("viewer").get(
        f"{API}/runs/{imported}/conversation/?node=researcher").json()
    first, second = thread["turns"]
    assert (first["replayable"], first["missing"], first["capture_hint"]) == (True, [], None)
    (tool,) = first["tools"]
    assert (tool["replayable"], tool["missing"], tool["capture_hint"]) == (
        False, ["tool result"], genai.CAPTURE_HINT)
    assert {k: second[k] for k in INSPECT} == INSPECT
    recorded = world.client("demo").get(
        f"{API}/runs/{world.demo_runs['support-agent']}/conversation/?node=assist").json()
    assert [t["replayable"] for t in recorded["turns"]] == [None] * len(recorded["turns"])
