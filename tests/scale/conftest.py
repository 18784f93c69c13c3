"""The websocket tests' small world (project, member with a token, slow base run) and their
wake-ups-only stream setting, shared with the scale-out tests."""

from collections.abc import Iterator

import pytest

from tests.ws.conftest import wakeups_only, world  # noqa: F401


@pytest.fixture(autouse=True)
def fresh_channel_layer() -> Iterator[None]:
    """Each test gets its own channel layer. channels_redis's layer keeps asyncio locks,
    bound to the event loop that first waits on them; every test runs its own loop, so a
    layer carried over from an earlier test can fail with "bound to a different event
    loop" (seen once in the scale session). A server process has one loop: this is a
    test-harness concern only."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()
