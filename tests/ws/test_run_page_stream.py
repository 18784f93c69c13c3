"""The stream the run page of a recording primary run opens (``web/_run_live.html``): the URL in
its ``ws-connect``, with the browser's session, delivers every event recorded after the page
rendered, once each, then the status that makes the page reload."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from forklab.runs import broadcast, services, tasks
from forklab.runs.models import Event, Run
from forklab.runs.specs import RunSpec
from forklab.runs.store import DjangoStore
from tests.ws.conftest import World
from tests.ws.helpers import TIMEOUT, connect, session_cookie

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

FINISHED = ("completed", "failed", "blocked", "cancelled")


@sync_to_async
def page_stream(world: World, run_id: str) -> str:
    """The query of the websocket the run page opens."""
    client = Client()
    client.force_login(world.member)
    html = client.get(f"/runs/{run_id}/").content.decode()
    found = re.search(r'ws-connect="/ws/runs/([^/"]+)/\?([^"]+)"', html)
    assert found is not None and found[1] == run_id, "the run page opens no stream"
    return found[2]


@sync_to_async
def page_has_stream(world: World, run_id: str) -> bool:
    client = Client()
    client.force_login(world.member)
    return "ws-connect" in client.get(f"/runs/{run_id}/").content.decode()


@sync_to_async
def recording_primary(world: World) -> tuple[str, int]:
    """A primary run whose log stops inside its second node (status running)."""
    store = DjangoStore(world.project)
    events = store.read(world.base.id)
    cut = [i for i, e in enumerate(events) if e.type == "node.started"][1]
    run_id = f"{world.base.id[:20]}-rec"
    store.append(run_id, [dataclasses.replace(e, run_id=run_id) for e in events[:cut + 1]],
                 expected_seq=0)
    run = Run.objects.get(pk=run_id)
    assert run.run_kind == "primary" and run.status == "running"
    return run_id, cut + 1


@sync_to_async
def record_more(world: World, run_id: str, after: int, count: int | None = None) -> int:
    """Append the base log's events after seq ``after`` (``count`` of them, else all) to the
    recording, and wake its streams as the runner does (``execution.on_event``)."""
    store = DjangoStore(world.project)
    rest = store.read(world.base.id)[after:]
    events = [dataclasses.replace(e, run_id=run_id) for e in rest[:count]]
    store.append(run_id, events, expected_seq=after)
    broadcast.notify(run_id, events[-1].seq)
    return events[-1].seq


async def frames_until_finished(ws: WebsocketCommunicator) -> tuple[list[int], list[str]]:
    """The seqs of the rows received and the statuses reported, up to a finished status."""
    rows: list[int] = []
    statuses: list[str] = []
    while not statuses or statuses[-1] not in FINISHED:
        frame = await ws.receive_from(timeout=TIMEOUT)
        if 'id="live-status"' in frame:
            status = re.search(r'data-status="(\w+)"', frame)
            assert status is not None, frame
            # the run page's live section asks for its reload (the live view's #fork-panel
            # is not on that page)
            assert 'hx-target="#fork-panel, #run-live"' in frame
            statuses.append(status[1])
        else:
            assert frame.startswith('<tbody hx-swap-oob="beforeend:#live-events">'), frame
            rows += [int(seq) for seq in re.findall(r'<tr data-seq="(\d+)"', frame)]
    return rows, statuses


async def test_the_run_pages_stream_delivers_an_event_appended_to_a_recording_primary(
        world: World) -> None:
    run_id, last = await recording_primary(world)
    query = await page_stream(world, run_id)
    assert query == f"after={last}&format=html&seen=running"
    ws = await connect(run_id, query, await session_cookie(world.member))
    assert await ws.receive_nothing(timeout=0.05)  # the page has every row recorded so far

    await record_more(world, run_id, last, count=1)
    frame = await ws.receive_from(timeout=TIMEOUT)
    assert frame.startswith('<tbody hx-swap-oob="beforeend:#live-events">')
    assert re.findall(r'<tr data-seq="(\d+)"', frame) == [str(last + 1)]

    end = await record_more(world, run_id, last + 1)
    rows, statuses = await frames_until_finished(ws)
    await ws.disconnect()
    assert rows == list(range(last + 2, end + 1)) and statuses == ["completed"]
    assert not await page_has_stream(world, run_id)  # reloaded, the page is a finished one


@pytest.fixture
def held_recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """start_recording whose task is enqueued only when the test says so."""
    held: dict[str, Any] = {}

    def hold(run_id: str, *args: Any) -> None:
        held["enqueue"] = sync_to_async(lambda: tasks.execute_recording.enqueue(run_id))

    monkeypatch.setattr(tasks, "enqueue_recording", hold)
    yield held


@sync_to_async
def start_recording(world: World) -> str:
    return services.start_recording(user=world.member, spec=RunSpec(
        graph=world.base.graph_slug, input=world.base.input, project=world.project.slug)).id


@sync_to_async
def log_seqs(run_id: str) -> list[int]:
    return list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))


async def test_a_primary_recorded_by_a_worker_streams_onto_its_page_opened_while_queued(
        world: World, held_recording: dict[str, Any]) -> None:
    run_id = await start_recording(world)
    query = await page_stream(world, run_id)
    assert query == "after=0&format=html&seen=queued"
    ws = await connect(run_id, query, await session_cookie(world.member))
    await held_recording["enqueue"]()
    rows, statuses = await frames_until_finished(ws)
    await ws.disconnect()
    assert rows == await log_seqs(run_id) == list(range(1, len(rows) + 1))
    # each reloads the page; "running" only when a wake-up found the run not finished yet
    assert statuses[-1] == "completed" and set(statuses) <= {"running", "completed"}
