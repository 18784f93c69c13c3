"""A run an older version stored with an unencodable string still streams: the event that
holds it arrives as ``{"unreadable": true}``, every other event as recorded."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from forklab.runs.models import Event
from tests.ws.conftest import World
from tests.ws.helpers import connect, seqs, token_header, until_status

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@sync_to_async
def spoil_first_event(run_id: str) -> None:
    event = Event.objects.get(run_id=run_id, seq=1)
    event.payload = {**event.payload, "input": {"topic": "old \ud800"}}
    event.save()


async def test_an_unreadable_event_streams_as_unreadable_and_the_rest_as_recorded(
        world: World) -> None:
    await spoil_first_event(world.base.id)
    ws = await connect(world.base.id, "after=0", token_header(world.token))
    events, status = await until_status(ws)
    await ws.disconnect()
    assert status == "completed"
    assert seqs(events) == list(range(1, world.base.last_seq + 1))
    assert events[0]["payload"]["unreadable"] is True
    assert all("unreadable" not in e["payload"] for e in events[1:])
