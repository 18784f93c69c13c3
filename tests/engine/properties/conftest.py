"""The property suite's fixtures: quiet fork logs (a failure prints its reproducer, not
hundreds of ``fork_started`` lines)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _quiet_fork_logs() -> Iterator[None]:
    logger = logging.getLogger("forklab.engine")
    level = logger.level
    logger.setLevel(logging.WARNING)
    yield
    logger.setLevel(level)
