"""The step drawer of an imported run says, beside every model and tool call, whether it is
replayable — and for an inspect-only one what was not captured and which setting turns
capture on (SPEC §8) — in the exchanges and in the conversation thread alike."""

from __future__ import annotations

import html as htmllib
import re

import pytest

from forklab.engine.traces import genai
from forklab.runs.traces import import_spans
from tests.traces.test_mapping import mixed_capture
from tests.web.conftest import World, htmx, page

pytestmark = pytest.mark.django_db

INSPECT_REPLY = ("inspect-only — missing: request messages, reply; turn on: "
                 + genai.CAPTURE_HINT)
INSPECT_TOOL = "inspect-only — missing: tool result; turn on: " + genai.CAPTURE_HINT


def _badges(html: str) -> list[str]:
    return [htmllib.unescape(b) for b in re.findall(
        r'<span class="chip replay[^"]*" data-replayable="[a-z]+">([^<]*)</span>', html)]


def test_the_drawer_badges_each_call_of_an_imported_run(world: World) -> None:
    (run_id,) = import_spans(user=None, project=world.demo, spans=mixed_capture(),
                             unreadable=[]).runs
    client = world.client("bob")
    drawer = page(client.get(f"/runs/{run_id}/steps/researcher/1/", headers=htmx("drawer")))
    badges = _badges(drawer)
    # the conversation (turn 1, its tool call, turn 2), then the exchanges (the same three;
    # a tool call that never returned is listed after the answered calls)
    assert badges == ["replayable", INSPECT_TOOL, INSPECT_REPLY,
                      "replayable", INSPECT_REPLY, INSPECT_TOOL]
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true" in drawer
    full = page(client.get(f"/runs/{run_id}/steps/researcher/1/"))
    assert _badges(full) == badges


def test_a_recorded_runs_drawer_has_no_badge(world: World) -> None:
    drawer = page(world.client("bob").get(
        f"/runs/{world.runs['support-agent']}/steps/assist/1/", headers=htmx("drawer")))
    assert _badges(drawer) == [] and "inspect-only" not in drawer
