"""Driving the stream: connect through the real ASGI stack, collect messages until a status."""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from forklab.asgi import application

TIMEOUT = 30  # generous: a slow CI machine, never a synchronization device
EVENT_KEYS = {"seq", "type", "node", "occurrence", "iteration", "payload", "at"}


def communicator(run_id: str, query: str = "", headers: list[tuple[bytes, bytes]] | None = None,
                 ) -> WebsocketCommunicator:
    path = f"/ws/runs/{run_id}/" + (f"?{query}" if query else "")
    return WebsocketCommunicator(application, path, headers=[
        (b"origin", b"http://testserver"), (b"host", b"testserver"), *(headers or [])])


def token_header(key: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Token {key}".encode())]


@sync_to_async
def session_cookie(user: Any) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    return [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]


async def connect(run_id: str, query: str = "",
                  headers: list[tuple[bytes, bytes]] | None = None) -> WebsocketCommunicator:
    ws = communicator(run_id, query, headers)
    connected, _ = await ws.connect(timeout=TIMEOUT)
    assert connected
    return ws


async def close_code(ws: WebsocketCommunicator) -> int:
    """The code the server closed with (it accepts, then closes, so browsers see the code)."""
    connected, code = await ws.connect(timeout=TIMEOUT)
    if not connected:
        return int(code or 0)
    message = await ws.receive_output(timeout=TIMEOUT)
    assert message["type"] == "websocket.close", message
    return int(message["code"])


async def receive(ws: WebsocketCommunicator) -> dict[str, Any]:
    return json.loads(await ws.receive_from(timeout=TIMEOUT))


async def until_status(ws: WebsocketCommunicator,
                       finished: tuple[str, ...] = ("completed", "failed", "blocked",
                                                    "cancelled"),
                       ) -> tuple[list[dict[str, Any]], str]:
    """Events received until a stream.status with a finished status; and that status."""
    events: list[dict[str, Any]] = []
    while True:
        message = await receive(ws)
        if message["type"] == "stream.status":
            if message["status"] in finished:
                return events, message["status"]
            continue
        events.append(message)


def seqs(events: list[dict[str, Any]]) -> list[int]:
    return [e["seq"] for e in events]
