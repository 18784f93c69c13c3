"""The run event stream over a websocket: ``/ws/runs/<id>/?after=SEQ[&format=html][&seen=STATUS]``.

Backlog first (the log after ``after``), then live: every ``run.wakeup`` on the run's group
makes the consumer read the log after the last seq it sent (``forklab.runs.streams``). The
messages are the Event JSON shape, or HTML fragments for the dashboard's htmx websocket
extension; a ``stream.status`` message follows when the run pauses or finishes (the socket
stays open — a paused fork continues once answered), and when a run the stream saw queued or
paused starts running. ``seen`` is the status the client shows already (the live page's chip):
a run whose status moved on between the page render and the connection is reported at once.

Close codes: 4401 not authenticated, 4404 no such run among the user's projects,
4400 malformed query (``after`` not a non-negative integer, unknown ``format``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer
from channels.security.websocket import AllowedHostsOriginValidator
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.template.loader import render_to_string

from forklab.runs import broadcast
from forklab.runs.errors import NotFound
from forklab.runs.models import RunStatus
from forklab.runs.streams import RunTail, on_stream_threads, readable_run

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
FORMATS = ("json", "html")
FINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.BLOCKED,
                   RunStatus.CANCELLED})


class TokenAuthMiddleware:
    """Authenticate a websocket by DRF token: ``Authorization: Token <key>`` or ``?token=``.

    Sits inside ``AuthMiddlewareStack``: without a token the session user stays; with one,
    the token's (active) user replaces it, and an unknown token means anonymous.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        key = token_from_scope(scope)
        if key is not None:
            scope = {**scope, "user": await user_for_token(key)}
        return await self.inner(scope, receive, send)


class OriginValidator:
    """Browser origins are checked (``ALLOWED_HOSTS``); a script is not a browser.

    A client that sends no ``Origin`` header and authenticates with a DRF token (header or
    ``?token=``) passes: browsers always send ``Origin`` on a websocket (and cannot set the
    ``Authorization`` header), so the check still guards every session-cookie connection —
    cross-site websocket hijacking needs a browser — while scripts need no fake Origin
    (SPEC §4.4).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.checked = AllowedHostsOriginValidator(inner)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        has_origin = any(name.lower() == b"origin" for name, _ in scope.get("headers", []))
        if not has_origin and token_from_scope(scope) is not None:
            return await self.inner(scope, receive, send)
        return await self.checked(scope, receive, send)


def token_from_scope(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            text: str = value.decode("latin-1")
            scheme, _, key = text.partition(" ")
            if scheme.lower() == "token" and key.strip():
                return key.strip()
    tokens = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
    return tokens[0] if tokens else None


@on_stream_threads
def user_for_token(key: str) -> Any:
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return AnonymousUser()
    return token.user


class RunStreamConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # untyped channels
    tail: RunTail | None = None
    group: str | None = None
    poller: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return await self.refuse(CLOSE_UNAUTHENTICATED)
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        after_text = query.get("after", ["0"])[0]
        self.format = query.get("format", ["json"])[0]
        # isascii: str.isdigit also accepts digits int() refuses ('²')
        if not (after_text.isascii() and after_text.isdigit()) or self.format not in FORMATS:
            return await self.refuse(CLOSE_BAD_REQUEST)
        run_id = self.scope["url_route"]["kwargs"]["run_id"]
        try:
            await readable_run(run_id, user)
        except NotFound:
            return await self.refuse(CLOSE_NOT_FOUND)
        broadcast.remember_loop()
        self.lock = asyncio.Lock()
        # seen=STATUS: what the page's chip shows, so a change since it rendered is reported
        self.tail = RunTail(run_id, after=int(after_text), seen=query.get("seen", [None])[0])
        self.group = broadcast.group_for(run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)  # before the backlog
        await self.accept()
        await self.pump()
        self.poller = asyncio.create_task(self.poll())

    async def refuse(self, code: int) -> None:
        # accept, then close: a browser sees the code (a refused handshake shows only 1006)
        await self.accept()
        await self.close(code=code)

    async def run_wakeup(self, message: dict[str, Any]) -> None:
        if self.tail is not None and not self.tail.stale(message.get("seq")):
            await self.pump()

    async def poll(self) -> None:
        """Re-read now and then: a lost wake-up (a full channel) delays, never drops, events."""
        interval = settings.FORKLAB_STREAM_POLL_S
        while self.tail is not None and self.tail.reported not in FINAL:
            await asyncio.sleep(interval)
            await self.pump()

    async def pump(self) -> None:
        assert self.tail is not None
        async with self.lock:
            async for item in self.tail.pump():
                await self.send(text_data=self.render(item))

    def render(self, item: dict[str, Any]) -> str:
        if self.format == "json":
            return json.dumps(item, ensure_ascii=False, default=str)
        assert self.tail is not None
        context: dict[str, Any] = {"run_id": self.tail.run_id}
        if item.get("type") == "stream.status":
            context.update(status=item["status"], last_seq=item["last_seq"])
        else:
            context["event"] = item
        return render_to_string("web/stream/event.html", context)

    async def disconnect(self, code: int) -> None:
        if self.poller is not None:
            self.poller.cancel()
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
