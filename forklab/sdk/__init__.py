"""Bring your own agent (SPEC §7): record a team's own Python agent code without a rewrite.

``@workflow(id)`` registers a function a ``workflow`` node runs; ``@tool(effect=…)`` makes
a function's calls recorded tool calls; ``step(name)`` groups calls; ``instrument()``
records the official ``openai`` and ``anthropic`` clients. Imports the engine only (never
Django), so ``import forklab`` stays light.
"""

from __future__ import annotations

from forklab.engine.workflow_node import ToolFailed, current_scope, step
from forklab.sdk.decorators import tool, workflow
from forklab.sdk.instrument import instrument

__all__ = ["ToolFailed", "current_scope", "instrument", "step", "tool", "workflow"]
