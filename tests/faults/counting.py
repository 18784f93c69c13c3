"""A slow, counting model provider for the fault tests (``FORKLAB_PROVIDERS`` in the child
processes): the scripted provider, answering after ``FORKLAB_FAULT_LATENCY_S`` (a slow
model, so a kill lands while a call is in flight) and appending one line per *completed*
call — a call paid for — to ``FORKLAB_FAULT_COUNT``. The parent reads the file to prove that
no model call was paid twice across a kill and the recovery that followed.
"""

from __future__ import annotations

import os
import time

from forklab.engine.providers import ChatRequest, ChatResponse
from forklab.engine.providers.scripted import ScriptedProvider


class CountingProvider:
    name = "scripted"

    def __init__(self) -> None:
        self.inner = ScriptedProvider()
        self.path = os.environ["FORKLAB_FAULT_COUNT"]
        self.latency_s = float(os.environ.get("FORKLAB_FAULT_LATENCY_S", "0"))

    def complete(self, request: ChatRequest) -> ChatResponse:
        time.sleep(self.latency_s)  # simulated model latency (not synchronization)
        response = self.inner.complete(request)
        with open(self.path, "a") as file:  # one short line, appended atomically
            file.write(f"{request.request_hash} {os.getpid()}\n")
            file.flush()
            os.fsync(file.fileno())
        return response
