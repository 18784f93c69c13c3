"""One vendor stub for each test module of this package, reset before every test."""

from __future__ import annotations

from tests.vendor_stub.fixtures import server, stub

__all__ = ["server", "stub"]
