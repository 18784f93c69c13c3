"""The run stream (SPEC §4.4): backlog after ?after=SEQ, then live, exactly once, authorized."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from forklab.engine.scenarios import SCENARIOS
from forklab.runs import broadcast, tasks
from forklab.runs.forking import answer, cancel, start_fork
from forklab.runs.models import Event, Run
from forklab.runs.services import record_run
from forklab.runs.specs import AnswerSpec, ForkSpec
from tests.ws.conftest import World
from tests.ws.helpers import (
    EVENT_KEYS,
    close_code,
    communicator,
    connect,
    receive,
    seqs,
    session_cookie,
    token_header,
    until_status,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def fork_spec(world: World) -> ForkSpec:
    return ForkSpec(base_run=world.base.id, at="start", label="streamed", changes=[
        {"kind": "prompt", "target": "draft", "system_prompt": "Write it as a limerick."}])


@pytest.fixture
def held_fork(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """start_fork whose tail is enqueued only when the test says so
    (``await held["enqueue"]()``: enqueueing touches the database, so it runs off the loop)."""
    held: dict[str, Any] = {}

    def hold(run_id: str, spec: dict[str, Any]) -> None:
        held["enqueue"] = sync_to_async(lambda: tasks.execute_fork.enqueue(run_id, spec))

    monkeypatch.setattr(tasks, "enqueue_fork", hold)
    yield held


@sync_to_async
def start(world: World) -> str:
    return start_fork(user=world.member, spec=fork_spec(world)).run.id


@sync_to_async
def log_seqs(run_id: str) -> list[int]:
    return list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))


@sync_to_async
def run_status(run_id: str) -> str:
    return Run.objects.get(pk=run_id).status


async def test_backlog_after_a_seq_sends_the_later_events_in_order_then_the_status(
        world: World) -> None:
    ws = await connect(world.base.id, "after=5", token_header(world.token))
    events, status = await until_status(ws)
    await ws.disconnect()
    assert seqs(events) == list(range(6, world.base.last_seq + 1))
    assert status == "completed"
    assert all(set(e) == EVENT_KEYS for e in events)
    assert events[-1]["type"] == "run.completed"


async def test_a_whole_fork_tail_arrives_live_in_seq_order_without_gaps_or_duplicates(
        world: World, held_fork: dict[str, Any]) -> None:
    run_id = await start(world)
    ws = await connect(run_id, "after=0", token_header(world.token))
    assert await ws.receive_nothing(timeout=0.05)  # queued: nothing in the log yet
    await held_fork["enqueue"]()
    events, status = await until_status(ws)
    await ws.disconnect()
    assert status == await run_status(run_id) == "completed"
    assert seqs(events) == await log_seqs(run_id)
    assert seqs(events) == list(range(1, len(events) + 1))
    assert events[0]["type"] == "run.started" and events[1]["type"] == "run.forked"


async def test_reconnecting_with_the_last_seq_gets_every_event_exactly_once(
        world: World, held_fork: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # The tail stops after event 8 until the first connection is gone, so the second one
    # starts with a backlog written while nobody was listening, then continues live.
    gate, reached = threading.Event(), threading.Event()
    notify = broadcast.notify

    def notify_then_wait(run_id: str, seq: int) -> None:
        notify(run_id, seq)
        if seq == 8:
            reached.set()
            gate.wait(timeout=60)

    monkeypatch.setattr(broadcast, "notify", notify_then_wait)
    run_id = await start(world)
    first = await connect(run_id, "", token_header(world.token))
    await held_fork["enqueue"]()
    try:
        received: list[dict[str, Any]] = []
        while len(received) < 8:
            message = await receive(first)
            if message["type"] != "stream.status":  # 'running', once the tail starts
                received.append(message)
        await first.disconnect()
    finally:
        gate.set()
    assert seqs(received) == list(range(1, 9))

    second = await connect(run_id, f"after={received[-1]['seq']}", token_header(world.token))
    rest, status = await until_status(second)
    await second.disconnect()
    assert status == "completed"
    assert seqs(received + rest) == await log_seqs(run_id)
    assert len(rest) > 0 and seqs(rest)[0] == 9


async def test_the_token_may_come_as_a_query_parameter(world: World) -> None:
    ws = await connect(world.base.id, f"after=0&token={world.token}")
    events, _ = await until_status(ws)
    await ws.disconnect()
    assert seqs(events) == list(range(1, world.base.last_seq + 1))


async def test_a_browser_session_authenticates_the_stream(world: World) -> None:
    ws = await connect(world.base.id, f"after={world.base.last_seq - 1}",
                       await session_cookie(world.member))
    events, status = await until_status(ws)
    await ws.disconnect()
    assert seqs(events) == [world.base.last_seq] and status == "completed"


async def test_a_user_outside_the_runs_project_is_closed_with_4404(world: World) -> None:
    from rest_framework.authtoken.models import Token

    key = (await sync_to_async(Token.objects.create)(user=world.outsider)).key
    assert await close_code(communicator(world.base.id, "", token_header(key))) == 4404


async def test_an_unknown_run_is_closed_with_4404(world: World) -> None:
    assert await close_code(communicator("nope", "", token_header(world.token))) == 4404


@pytest.mark.parametrize("headers", [[], token_header("not-a-token")])
async def test_an_unauthenticated_client_is_closed_with_4401(
        world: World, headers: list[tuple[bytes, bytes]]) -> None:
    assert await close_code(communicator(world.base.id, "", headers)) == 4401


@pytest.mark.parametrize("query", ["after=-1", "after=x", "after=%C2%B2", "format=xml"])
async def test_a_malformed_query_is_closed_with_4400(world: World, query: str) -> None:
    assert await close_code(communicator(world.base.id, query, token_header(world.token))) == 4400


async def test_html_format_sends_table_rows_with_their_seq_for_htmx(world: World) -> None:
    ws = await connect(world.base.id, f"after={world.base.last_seq - 2}&format=html",
                       token_header(world.token))
    frames = [await ws.receive_from(timeout=30) for _ in range(3)]
    await ws.disconnect()
    last = world.base.last_seq
    for frame, seq in zip(frames[:2], (last - 1, last), strict=True):
        assert 'hx-swap-oob="beforeend:#live-events"' in frame
        assert f'<tr data-seq="{seq}"' in frame
    assert 'id="live-status"' in frames[2] and 'data-status="completed"' in frames[2]


async def test_lost_wakeups_only_delay_events_the_stream_polls_the_log(
        world: World, held_fork: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
        settings: Any) -> None:
    settings.FORKLAB_STREAM_POLL_S = 1
    monkeypatch.setattr(broadcast, "notify", lambda run_id, seq: None)  # every wake-up lost
    run_id = await start(world)
    ws = await connect(run_id, "", token_header(world.token))
    await held_fork["enqueue"]()
    events, status = await until_status(ws)
    await ws.disconnect()
    assert status == "completed"
    assert seqs(events) == await log_seqs(run_id)


def redis_reachable(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


REDIS_URL = os.environ.get("FORKLAB_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.mark.skipif(not redis_reachable(REDIS_URL), reason=f"no Redis at {REDIS_URL}")
async def test_wakeups_through_the_redis_channel_layer_stream_a_live_tail(
        world: World, held_fork: dict[str, Any], settings: Any) -> None:
    settings.CHANNEL_LAYERS = {"default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": None}],
                   "prefix": f"forklab-test-{uuid.uuid4().hex[:8]}"},
    }}
    from channels.layers import get_channel_layer
    from channels_redis.core import RedisChannelLayer

    assert isinstance(get_channel_layer(), RedisChannelLayer)
    run_id = await start(world)
    ws = await connect(run_id, "", token_header(world.token))
    await held_fork["enqueue"]()
    events, status = await until_status(ws)
    await ws.disconnect()
    assert status == "completed"
    assert seqs(events) == await log_seqs(run_id)
    assert seqs(events) == list(range(1, len(events) + 1))


@sync_to_async
def paused_fork(world: World) -> str:
    scenario = SCENARIOS["order-fulfilment"]
    base = record_run(project=world.project, graph=scenario.graph(), input=scenario.input,
                      human_decision="approved")
    return start_fork(user=world.member, spec=ForkSpec(
        base_run=base.id, at={"before_node": "approve"})).run.id


async def test_a_paused_fork_reports_paused_and_streams_on_once_answered(world: World) -> None:
    run_id = await paused_fork(world)
    ws = await connect(run_id, "", token_header(world.token))
    before, status = await until_status(ws, finished=("paused",))
    assert status == "paused" and before[-1]["type"] == "human.requested"
    await sync_to_async(answer)(user=world.member, run_id=run_id,
                                spec=AnswerSpec(decision="approved"))
    after, status = await until_status(ws)
    await ws.disconnect()
    assert status == "completed"
    assert seqs(before + after) == await log_seqs(run_id)


async def test_cancelling_a_paused_fork_wakes_its_stream(world: World) -> None:
    run_id = await paused_fork(world)
    ws = await connect(run_id, "", token_header(world.token))
    await until_status(ws, finished=("paused",))
    await sync_to_async(cancel)(user=world.member, run_id=run_id)
    after, status = await until_status(ws)
    await ws.disconnect()
    assert status == "cancelled" and [e["type"] for e in after] == ["run.cancelled"]



async def test_a_stream_opened_on_a_queued_fork_hears_running_then_the_final_status(
        world: World, held_fork: dict[str, Any]) -> None:
    run_id = await start(world)
    ws = await connect(run_id, "", token_header(world.token))
    await held_fork["enqueue"]()
    statuses = []
    while not statuses or statuses[-1]["status"] == "running":
        message = await receive(ws)
        if message["type"] == "stream.status":
            statuses.append(message)
    await ws.disconnect()
    assert [s["status"] for s in statuses] == ["running", "completed"]
    assert statuses[-1]["last_seq"] == (await log_seqs(run_id))[-1]


async def test_a_stream_opened_on_a_running_or_finished_run_reports_only_a_stop(
        world: World) -> None:
    ws = await connect(world.base.id, f"after={world.base.last_seq}", token_header(world.token))
    assert await receive(ws) == {"type": "stream.status", "status": "completed",
                                 "last_seq": world.base.last_seq}
    assert await ws.receive_nothing(timeout=0.05)
    await ws.disconnect()


@sync_to_async
def post_fork_through_the_api(world: World) -> str:
    import json

    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Token {world.token}")
    body = fork_spec(world).model_dump(mode="json", exclude_none=True)
    response = client.post("/api/v1/forks/", data=json.dumps(body),
                           content_type="application/json")
    assert response.status_code == 202, response.content
    return str(response.json()["id"])


async def test_a_fork_started_through_the_api_streams_its_tail_in_seq_order(
        world: World, held_fork: dict[str, Any]) -> None:
    run_id = await post_fork_through_the_api(world)
    ws = await connect(run_id, "after=0", token_header(world.token))
    await held_fork["enqueue"]()  # the background tail starts once the client is listening
    events, status = await until_status(ws)
    await ws.disconnect()
    assert status == await run_status(run_id) == "completed"
    assert seqs(events) == await log_seqs(run_id) == list(range(1, len(events) + 1))


async def test_a_stream_stuck_in_a_slow_read_does_not_hold_up_other_streams(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Streams read on a pool of their own (``FORKLAB_WS_DB_THREADS``), not one shared
    thread: while one stream's page read is stuck, another connects and gets its backlog."""
    from forklab.runs import streams

    stuck, release = threading.Event(), threading.Event()
    read_page = streams.read_page

    def slow_for_one(run_id: str, after: int, limit: int = streams.BATCH) -> Any:
        if after == 1:  # the first stream's backlog read, only
            stuck.set()
            assert release.wait(30)
        return read_page(run_id, after, limit)

    monkeypatch.setattr(streams, "aread_page", streams.on_stream_threads(slow_for_one))
    blocked = communicator(world.base.id, "after=1", token_header(world.token))
    connecting = asyncio.ensure_future(blocked.connect(timeout=30))
    assert await sync_to_async(stuck.wait, thread_sensitive=False)(30)
    try:
        other = await connect(world.base.id, f"after={world.base.last_seq - 1}",
                              token_header(world.token))
        events, status = await until_status(other)
        await other.disconnect()
        assert seqs(events) == [world.base.last_seq] and status == "completed"
    finally:
        release.set()
    assert (await connecting)[0]
    events, status = await until_status(blocked)
    await blocked.disconnect()
    assert seqs(events) == list(range(2, world.base.last_seq + 1)) and status == "completed"
