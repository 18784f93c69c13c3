"""The one fake model every system under test calls: fixed latency, fixed usage, counted.

Its answer is a short deterministic function of the request (system prompt and user text),
so a changed prompt changes the answer and that change reaches the nodes downstream (a join
really depends on the worker it joins). Token usage is fixed, latency is a fixed sleep, and
every call that reaches the model is counted — a peer that re-executes 500 nodes for a "null
fork" shows 500 calls. Thread-safe: LangGraph runs a super-step's nodes on a thread pool.
"""

from __future__ import annotations

import hashlib
import threading
import time

INPUT_TOKENS = 120
OUTPUT_TOKENS = 24
MODEL = "fake-model"


class FakeModel:
    """Counts calls; ``complete`` sleeps ``latency_ms`` and returns a text derived from the input."""

    def __init__(self, latency_ms: float = 0.0) -> None:
        self.latency_s = latency_ms / 1000.0
        self.calls = 0
        self._lock = threading.Lock()

    def complete(self, system: str, user: str) -> str:
        with self._lock:
            self.calls += 1
        if self.latency_s:
            time.sleep(self.latency_s)
        return answer(system, user)


def answer(system: str, user: str) -> str:
    digest = hashlib.sha256(f"{system}\x00{user}".encode()).hexdigest()
    return f"answer {digest[:16]}"
