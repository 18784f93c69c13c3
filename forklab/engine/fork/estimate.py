"""Predict what a fork's tail will cost before it runs (SPEC §3.4 ``estimate``).

The prediction walks the base run's executions after the fork point. A node is *affected*
when a change targets it or it reads a key that an affected node (or a memory/input change)
writes. With memoization on, unaffected nodes are predicted to be served from the recording
for free; every other agent call is priced at its recorded token counts under the model the
fork will use. It is an estimate, not a promise: a changed route can reach nodes the base
never ran, which the warnings say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.fork.apply import agent_targets
from forklab.engine.fork.changes import (
    Change,
    HumanResponseChange,
    InputPatchChange,
    MemoryChange,
    OutputChange,
    RouteChange,
    ToolChange,
)
from forklab.engine.graph import AgentNode, GraphSpec, RouterNode
from forklab.engine.providers import PriceTable
from forklab.engine.state import Execution


@dataclass
class Estimate:
    live_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    unpriced_models: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    events_reused: int = 0

    def wire(self) -> dict[str, Any]:
        return {"live_calls": self.live_calls, "tokens": self.tokens,
                "cost_usd": round(self.cost_usd, 8)}


def _seed_keys(changes: Sequence[Change], changed_inputs: set[str]) -> set[str]:
    keys = set(changed_inputs)
    for item in changes:
        if isinstance(item, MemoryChange):
            keys |= set(item.set) | set(item.delete)
        elif isinstance(item, HumanResponseChange):
            keys |= set(item.memory_updates)
    return keys


def _model_for(graph: GraphSpec, node: Any, role: str | None, index: int | None) -> str:
    if isinstance(node, AgentNode) and node.roles and role in node.roles:
        return graph.resolve_agent(node.roles[role].agent_for(index or 0)).model
    agent = getattr(node, "agent", None)
    return graph.resolve_agent(agent).model if agent is not None else "?"


def estimate_tail(
    *, graph: GraphSpec, tail: Sequence[Execution], changes: Sequence[Change],
    changed_inputs: set[str], memoize: bool, prices: PriceTable,
) -> Estimate:
    """Predict live calls, tokens and USD of the tail (``tail`` = base executions after it)."""
    est = Estimate()
    targets = agent_targets(changes)
    targets |= {c.node for c in changes if isinstance(c, (OutputChange, ToolChange))}
    routes = {c.source for c in changes if isinstance(c, RouteChange)}
    substituted = {c.node for c in changes if isinstance(c, OutputChange)}
    dirty = _seed_keys(changes, changed_inputs)
    human_changed = any(isinstance(c, HumanResponseChange) for c in changes)
    unpriced: set[str] = set()
    for ex in tail:
        if ex.node not in graph.node_ids():
            est.warnings.append(f"node {ex.node!r} is not in the fork's graph")
            continue
        node = graph.node(ex.node)
        affected = (ex.node in targets or ex.node in routes or bool(dirty & set(ex.reads))
                    or (human_changed and ex.kind == "approval"))
        if affected:
            dirty |= set(ex.writes) | set(ex.deletes)
        if ex.node in substituted or (memoize and not affected):
            continue
        for action in ex.actions:
            if action["type"] == "agent_result":
                model = _model_for(graph, node, action["role"], action["index"])
                tokens = int(action["input_tokens"]) + int(action["output_tokens"])
                cost = prices.cost(model, int(action["input_tokens"]),
                                   int(action["output_tokens"]))
                est.live_calls += 1
                est.tokens += tokens
                if cost is None:
                    unpriced.add(model)
                else:
                    est.cost_usd += cost
            elif action["type"] == "tool" and getattr(node, "effect", "read") == "read":
                est.live_calls += 1
    for source in routes:
        router = graph.node(source)
        if isinstance(router, RouterNode):
            est.warnings.append(
                f"route change at {source!r}: a branch the base never took is not in the "
                "estimate; its first side-effect node will be blocked unless allowed")
    if memoize:
        est.warnings.append("memoize is on: nodes the change cannot reach are predicted "
                            "to be served from the recording")
    est.unpriced_models = sorted(unpriced)
    return est


def changed_input_keys(old: dict[str, Any], new: dict[str, Any]) -> set[str]:
    from forklab.engine.canonical import canonical_json

    keys = set(old) | set(new)
    return {k for k in keys if canonical_json(old.get(k)) != canonical_json(new.get(k))}


__all__ = ["Estimate", "InputPatchChange", "changed_input_keys", "estimate_tail"]
