"""The diff page aligns agent loops call by call (SPEC §6.5): comparing a support-agent run
with one whose order cannot be found shows the refund call gone and the answer changed."""

from __future__ import annotations

import html as htmllib
import re
import uuid

import pytest

from forklab.engine.events import from_wire
from forklab.engine.recording import run_recorded
from forklab.engine.scenarios import SCENARIOS
from forklab.runs.store import DjangoStore
from tests.engine.golden_tool import deterministic_env
from tests.web.conftest import World, page

pytestmark = pytest.mark.django_db

UNKNOWN_ORDER = "My order A-9999 arrived damaged. Please refund it."


def store_run(world: World, ticket: str) -> str:
    """A support-agent run recorded now with ``ticket``, stored in the demo project."""
    scenario = SCENARIOS["support-agent"]
    recorded = run_recorded(scenario.graph(), {**scenario.input, "ticket": ticket},
                            env=deterministic_env())
    run_id = uuid.uuid4().hex
    events = [from_wire(e.to_wire(), run_id=run_id) for e in recorded.event_log]
    DjangoStore(world.demo).append(run_id, events, expected_seq=0)
    return run_id


def test_the_diff_page_shows_the_refund_call_gone_and_the_answer_changed(
        world: World) -> None:
    base = world.runs["support-agent"]
    variant = store_run(world, UNKNOWN_ORDER)
    response = world.client("bob").get(f"/compare/{base}/{variant}/")
    assert response.status_code == 200
    html = page(response)
    assert "Calls, aligned by call key" in html
    rows = re.findall(r'<tr class="op-\w+" data-call="([^"]+)" data-op="(\w+)">', html)
    assert ("assist#1/turn:2/tool:1", "skipped") in rows
    assert ("assist#1/turn:1", "changed") in rows and len(rows) == 6
    text = htmllib.unescape(html)
    assert "The issue_refund call (assist#1/turn:2/tool:1) is gone." in text
    assert "The reply of assist#1/turn:2 changed." in text


def test_runs_without_a_tool_loop_show_no_call_alignment(world: World) -> None:
    run = world.runs["diamond"]
    html = page(world.client("bob").get(f"/compare/{run}/{run}/"))
    assert "Calls, aligned by call key" not in html
