"""One vendor stub for each test module of this package, reset before every test; and an
injected ``sleep`` for the retries."""

from __future__ import annotations

import pytest

from tests.vendor_stub.fixtures import server, stub

__all__ = ["Sleeps", "server", "sleeps", "stub"]


class Sleeps:
    """An injected ``sleep``: records the delays the retries asked for, waits none."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()
