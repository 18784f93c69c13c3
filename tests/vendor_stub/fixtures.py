"""pytest fixtures for the vendor stub: import both into a test module (or a conftest) —
``from tests.vendor_stub.fixtures import server, stub`` — for one stub per module, reset
(no faults, no requests) before every test that asks for ``stub``."""

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
