"""The websocket tests' small world (project, member with a token, slow base run) and their
wake-ups-only stream setting, shared with the scale-out tests."""

from tests.ws.conftest import wakeups_only, world  # noqa: F401
