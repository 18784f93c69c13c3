"""A one-call fork of an imported run made through the dashboard's composer (SPEC §8 (a)):
posted from the call composer with a model change (the scripted provider: no network), it
runs, and its compare page shows the old and the new reply side by side with the trace's
later calls marked not re-executed."""

from __future__ import annotations

import dataclasses
import html as htmllib
import re
from typing import Any

import pytest
from django.test import Client

from forklab.runs.models import Event, Run
from forklab.runs.task_backends import drain
from forklab.runs.traces import import_spans
from tests.api.conftest import World, fresh_world
from tests.traces.test_mapping import workflow

__all__ = ["fresh_world"]

KEY = "researcher#1/turn:1"


@pytest.mark.django_db(transaction=True)
def test_a_call_composer_fork_completes_and_its_compare_page_marks_later_calls(
        fresh_world: World, settings: Any) -> None:
    settings.FORKLAB_TRACE_SETTLE_S = 0
    (run,) = import_spans(user=None, project=fresh_world.lab, unreadable=[], spans=[
        dataclasses.replace(s, trace_id="8" * 32) for s in workflow()]).runs
    at = Event.objects.get(run_id=run, type="node.started", node="researcher").seq - 1
    client = Client()
    client.force_login(fresh_world.users["member"])
    composer = htmllib.unescape(client.get(f"/runs/{run}/fork/",
                                           {"at": at, "call": KEY}).content.decode())
    messages = re.search(r'name="call-messages"[^>]*>([^<]*)</textarea>', composer)
    assert messages is not None
    response = client.post(f"/runs/{run}/fork/", {
        "at": at, "at_call": KEY, "call-model": "scripted-small", "call-provider": "",
        "call-prompt": "", "call-temperature": "1.0", "call-messages": messages.group(1),
        "max_live_calls": 5, "max_cost_usd": "1.00", "label": "scripted"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert drain(timeout=60)
    fork = Run.objects.get(parent_run_id=run, label="scripted")
    assert fork.status == "completed", fork.error
    assert fork.fork_mutations == [{"kind": "model", "call": KEY, "model": "scripted-small",
                                    "provider": "scripted"}]
    page = htmllib.unescape(client.get(f"/compare/{run}/{fork.id}/").content.decode())
    rows = dict(re.findall(r'<tr class="op-\w+" data-call="([^"]+)" data-op="(\w+)">', page))
    assert rows[KEY] == "changed"
    assert rows["researcher#1/turn:1/tool:1"] == rows["researcher#1/turn:2"] == \
        rows["writer#1/turn:1"] == "not_reexecuted"
    assert "3 not re-executed" in page and "not asked again" in page
    assert f"model of {KEY}" in page  # the change names its call, not the whole node
    assert "x is found" in page  # the base's later reply, shown beside nothing asked again
    assert "Fork the imported run again" in page and "Fork this fork" not in page
    # a one-call fork is not forked again: its page offers the imported run instead
    shown = htmllib.unescape(client.get(f"/runs/{fork.id}/").content.decode())
    assert f'data-one-call="{KEY}"' in shown
    assert set(re.findall(r'<span class="txt">(\w+) before', shown)) == {"inspect"}
    assert f'href="/runs/{fork.id}/fork/' not in shown
    assert f'href="/runs/{run}/#imported-forks">fork the imported run</a>' in shown
    drawer = client.get(f"/runs/{fork.id}/steps/researcher/1/").content.decode()
    assert "forkmark" not in drawer and "data-action=" not in drawer
    assert "data-fork-step" not in drawer
