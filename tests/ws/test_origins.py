"""Who may open a stream without a browser's ``Origin`` (SPEC §4.4): scripts with a token.

Browsers always send ``Origin`` on a websocket, and it is checked against ``ALLOWED_HOSTS``
(a page on another site cannot ride a user's session cookie); a script authenticating with a
token — header or ``?token=`` — needs no ``Origin`` at all.
"""

from __future__ import annotations

import pytest
from channels.testing import WebsocketCommunicator

from forklab.asgi import application
from tests.ws.conftest import World
from tests.ws.helpers import close_code, seqs, session_cookie, token_header, until_status

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def without_origin(path: str, headers: list[tuple[bytes, bytes]]) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, path, headers=[(b"host", b"testserver"),
                                                             *headers])


def with_origin(path: str, origin: bytes,
                headers: list[tuple[bytes, bytes]]) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, path, headers=[
        (b"origin", origin), (b"host", b"testserver"), *headers])


@pytest.mark.parametrize("how", ["header", "query"])
async def test_a_script_with_a_token_needs_no_origin(world: World, how: str) -> None:
    path = f"/ws/runs/{world.base.id}/"
    ws = (without_origin(path, token_header(world.token)) if how == "header"
          else without_origin(f"{path}?token={world.token}", []))
    connected, _ = await ws.connect(timeout=30)
    assert connected
    events, status = await until_status(ws)
    await ws.disconnect()
    assert status == "completed" and seqs(events) == list(range(1, world.base.last_seq + 1))


async def test_a_session_without_origin_is_refused(world: World) -> None:
    ws = without_origin(f"/ws/runs/{world.base.id}/", await session_cookie(world.member))
    connected, _ = await ws.connect(timeout=30)
    assert not connected


@pytest.mark.parametrize("headers", ["token", "session"])
async def test_a_browser_origin_of_another_site_is_refused_even_with_a_token(
        world: World, headers: str) -> None:
    auth = (token_header(world.token) if headers == "token"
            else await session_cookie(world.member))
    ws = with_origin(f"/ws/runs/{world.base.id}/", b"https://evil.example", auth)
    connected, _ = await ws.connect(timeout=30)
    assert not connected


async def test_a_token_that_is_wrong_without_origin_is_still_unauthenticated(
        world: World) -> None:
    ws = without_origin(f"/ws/runs/{world.base.id}/", token_header("not-a-token"))
    assert await close_code(ws) == 4401
