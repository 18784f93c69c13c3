"""Wake-ups for websocket consumers: "run X has events up to seq N".

The event log is the truth; these messages carry no event data, only a nudge to read the
log after the consumer's last seq. Sent from worker threads: with the in-memory channel
layer the send is scheduled on the server's event loop (recorded by the first consumer to
connect), because the layer's queues belong to that loop; other layers go through
``async_to_sync``.
"""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

log = logging.getLogger("forklab.runs.broadcast")
_server_loop: asyncio.AbstractEventLoop | None = None


def group_for(run_id: str) -> str:
    return f"run.{run_id}"


def remember_loop() -> None:
    """Called from async code in the server process (consumer connect)."""
    global _server_loop
    _server_loop = asyncio.get_running_loop()


def notify(run_id: str, seq: int) -> None:
    """Tell consumers of ``run_id`` that events up to ``seq`` exist. Never raises."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "run.wakeup", "run_id": run_id, "seq": seq}
    try:
        if isinstance(layer, InMemoryChannelLayer):
            loop = _server_loop
            if loop is None or loop.is_closed():
                return  # nobody is listening in this process
            asyncio.run_coroutine_threadsafe(layer.group_send(group_for(run_id), message), loop)
        else:
            async_to_sync(layer.group_send)(group_for(run_id), message)
    except Exception:  # a broadcast is a wake-up, never a reason to fail a run
        log.warning("broadcast for run %s seq %s failed", run_id, seq, exc_info=True)
