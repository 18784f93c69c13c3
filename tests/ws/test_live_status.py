"""The live page's status chip: a run whose status moved on between the page render and the
websocket connection is reported at once (the chip once stayed "queued" while events streamed)."""

from __future__ import annotations

import dataclasses

import pytest
from asgiref.sync import sync_to_async

from forklab.runs.store import DjangoStore
from tests.ws.conftest import World
from tests.ws.helpers import connect, receive, token_header

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@sync_to_async
def running_copy(world: World) -> tuple[str, int]:
    """A run whose log stops inside its second node: status running (a real prefix)."""
    store = DjangoStore(world.project)
    events = store.read(world.base.id)
    cut = [i for i, e in enumerate(events) if e.type == "node.started"][1]
    new_id = f"{world.base.id[:20]}-live"
    store.append(new_id, [dataclasses.replace(e, run_id=new_id) for e in events[:cut + 1]],
                 expected_seq=0)
    return new_id, cut + 1


async def test_a_page_rendered_while_queued_hears_running_when_it_connects(
        world: World) -> None:
    run_id, last = await running_copy(world)
    ws = await connect(run_id, f"after={last}&seen=queued", token_header(world.token))
    assert await receive(ws) == {"type": "stream.status", "status": "running", "last_seq": last}
    await ws.disconnect()


async def test_a_page_that_already_shows_the_status_hears_nothing_new(world: World) -> None:
    run_id, last = await running_copy(world)
    ws = await connect(run_id, f"after={last}&seen=running", token_header(world.token))
    assert await ws.receive_nothing(timeout=0.1)
    await ws.disconnect()


async def test_an_unknown_seen_status_is_ignored(world: World) -> None:
    run_id, last = await running_copy(world)
    ws = await connect(run_id, f"after={last}&seen=bogus", token_header(world.token))
    assert await ws.receive_nothing(timeout=0.1)  # as without seen: an active run is quiet
    await ws.disconnect()


async def test_a_finished_run_is_reported_even_to_a_page_that_shows_it_finished(
        world: World) -> None:
    base = world.base
    ws = await connect(base.id, f"after={base.last_seq}&seen=completed",
                       token_header(world.token))
    assert await receive(ws) == {"type": "stream.status", "status": "completed",
                                 "last_seq": base.last_seq}  # the page turns into the result
    await ws.disconnect()
