"""One vendor stub for each test module of this package, reset before every test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.vendor_stub import VendorStub


@pytest.fixture(scope="module")
def server() -> Iterator[VendorStub]:
    with VendorStub() as stub:
        yield stub


@pytest.fixture
def stub(server: VendorStub) -> VendorStub:
    """The module's stub with no faults queued and no requests seen."""
    server.reset()
    return server


class Sleeps:
    """An injected ``sleep``: records the delays the retries asked for, waits none."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()
