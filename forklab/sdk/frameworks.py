"""Agent frameworks built on the official clients: their structure as ``forklab.step``s.

LangGraph (over langchain-openai / langchain-anthropic) is recorded unchanged — its model
calls go through the official clients — and each graph node it runs becomes a step: a call
made while LangGraph runs node ``agent`` is keyed ``agent/openai:1``. The node is read from
LangChain's own context variable for the running config (``metadata.langgraph_node``), so
nothing in the team's code changes and nothing is patched in LangGraph.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from forklab.engine.workflow_node import add_step_source

_NOT_ID = re.compile(r"[^A-Za-z0-9_\-]")


def step_name(text: str) -> str:
    """``text`` as a step name (an identifier: other characters become ``_``)."""
    name = _NOT_ID.sub("_", text) or "_"
    return f"_{name}" if name[0].isdigit() or name[0] == "-" else name


def langgraph_node() -> tuple[str, ...]:
    """The LangGraph node running here, as a step (``()`` outside LangGraph)."""
    module = sys.modules.get("langchain_core.runnables.config")
    if module is None:
        return ()
    config: Any = module.var_child_runnable_config.get()
    node = ((config or {}).get("metadata") or {}).get("langgraph_node")
    return (step_name(node),) if isinstance(node, str) and node else ()


def install() -> None:
    """Key calls made inside a framework's nodes under them (idempotent)."""
    add_step_source(langgraph_node)


__all__ = ["install", "langgraph_node", "step_name"]
