"""A model asked from inside a tool (``ctx.ask``, SPEC §6.4), recorded as a call of its own.

The tool runs while its node executes (possibly beside the other tool calls of its turn), so
the events of its asks are buffered and recorded when the tool returns, before its result:
the log does not depend on timing. Each ask is keyed under the tool's call key
(``turn:1/tool:1/ask:1``; a tool node's ``ask:1``) and goes through :func:`asking.ask`, so a
recording, a change or a fork's budget answers it like any model call.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from forklab.engine.asking import ask
from forklab.engine.context import NodeContext
from forklab.engine.events import Event
from forklab.engine.graph import AgentSpec
from forklab.engine.oracle import NodeFailure


class ToolAsks:
    """The asks of one tool call: their key prefix, a counter and the buffered events."""

    def __init__(self, ctx: NodeContext, under: str | None) -> None:
        self.under = under
        self.count = 0
        self.events: list[tuple[type[Event], dict[str, Any]]] = []
        self.record_to = ctx.sink
        self.ctx = dataclasses.replace(ctx, sink=self._buffer, before_model_call=None,
                                       durable=lambda: None)

    def _buffer(self, cls: type[Event], fields: dict[str, Any]) -> None:
        self.events.append((cls, fields))

    def __call__(self, agent: Any, messages: str | list[dict[str, Any]], **params: Any) -> str:
        self.count += 1
        key = f"ask:{self.count}" if self.under is None else f"{self.under}/ask:{self.count}"
        spec = self._agent(agent, params)
        conversation = ([{"role": "user", "content": messages}] if isinstance(messages, str)
                        else list(messages))
        try:
            return ask(self.ctx, spec, conversation, call=key).text
        except NodeFailure as failure:  # recorded (call.failed); the tool sees it raise
            raise RuntimeError(f"ctx.ask failed: {failure.error['message']}") from None

    def _agent(self, agent: Any, params: dict[str, Any]) -> AgentSpec:
        if isinstance(agent, str):
            known = self.ctx.graph.agents
            if agent not in known:
                raise ValueError(f"ctx.ask: unknown agent {agent!r}; the graph's agents: "
                                 f"{', '.join(sorted(known)) or 'none'}")
            spec = known[agent]
        elif isinstance(agent, AgentSpec):
            spec = agent
        else:
            spec = AgentSpec.model_validate(agent)
        if params:
            spec = AgentSpec.model_validate({**spec.model_dump(), **params})
        return spec

    def record(self) -> None:
        """Record the asks' events in the node's log, in the order they were made."""
        for cls, fields in self.events:
            self.record_to(cls, fields)
        self.events.clear()


__all__ = ["ToolAsks"]
