"""The recovery tests' world (``recovery_world``), as a fixture for this directory."""

from tests.runs.recovery_world import world  # noqa: F401
