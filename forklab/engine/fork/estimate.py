"""Predict what a fork's tail will cost before it runs (SPEC §3.4 ``estimate``).

The prediction walks the base's logical run from the effective point. A node is *affected*
when a change of the request targets it, when it ran under a graph without one of the
lineage's config changes (an inherited execution re-run under the fork's graph), when it is
a router a route change forces, or when it declares a read of a key an affected node (or a
memory/input change) writes. With memoization on, unaffected nodes are predicted to be
served from the recording for free. Every other model call is priced at its recorded token
counts under the model the fork will use; tool calls count when they run for real (read
tools, and write tools the policy allows); an allowed subgraph counts its child run's calls.
It is an estimate, not a promise — and its cost is not an upper bound: each call is priced
at the token counts it *recorded*, while a changed node's answer may be longer, so every
node reading it (a join over parallel branches reads several) sends a longer request than
recorded and costs more. What bounds spend is the budget, checked while running before each
call against its worst case (its request's tokens + ``max_tokens``). A changed route can
also reach nodes the base never ran, which the warnings say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forklab.engine.actions import AgentAnswer, AgentAsked, ChildOutcome, ToolCall, call_of
from forklab.engine.errors import ForklabError
from forklab.engine.fork.apply import Target, config_targets
from forklab.engine.fork.changes import (
    Change,
    HumanResponseChange,
    MemoryChange,
    OutputChange,
    RouteChange,
    ToolChange,
)
from forklab.engine.fork.effective import changed_input_keys
from forklab.engine.graph import (
    AgentNode,
    GraphSpec,
    RouterNode,
    SubgraphNode,
    ToolNode,
    WorkflowNode,
)
from forklab.engine.providers import PriceTable
from forklab.engine.state import Execution, RunState

if TYPE_CHECKING:
    from forklab.engine.fork.base import BaseRun
    from forklab.engine.fork.tail import Policy


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


def _seed_keys(applied: Sequence[Change], dirty: set[str]) -> set[str]:
    keys = set(dirty)
    for item in applied:
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


@dataclass
class _Walk:
    """What the walk has learnt so far."""

    graph: GraphSpec
    policy: Policy
    prices: PriceTable
    base: BaseRun
    est: Estimate = field(default_factory=Estimate)
    unpriced: set[str] = field(default_factory=set)
    guarded: list[str] = field(default_factory=list)  # write tool calls the guard decides on

    def count(self, ex: Execution, node: Any, graph: GraphSpec | None,
              from_call: str | None = None) -> None:
        """Count ``ex``'s calls; with ``from_call`` (a call-level point's key part in
        ``ex``) only that call's and the later ones: the earlier ones are served from the
        log."""
        for action in _from_call(ex.actions, from_call):
            # a simulated answer or child result was supplied by a change: never a call
            if isinstance(action, AgentAnswer) and action.label != "simulated":
                self._agent(graph, node, action)
            elif isinstance(action, ToolCall) and isinstance(node, ToolNode) and (
                    node.effect == "read" or self.policy.allows(node.id)):
                self.est.live_calls += 1
            elif isinstance(action, ToolCall) and action.call is not None:
                self._chosen(graph, action)
            elif (isinstance(action, ChildOutcome) and action.label != "simulated"
                  and self.policy.allows(ex.node)):
                child = self.base.load_run(action.child_run_id)
                if child is not None:
                    self._child(child)

    def _chosen(self, graph: GraphSpec | None, action: ToolCall) -> None:
        """A call of a tool the model chose or a workflow's code called: it runs for real
        when it reads or the policy allows it; a write the guard decides on (served its
        recorded result, or blocked) is no call, and is named in a warning."""
        if self._effect(graph, action) == "read" or self.policy.allows(action.tool):
            self.est.live_calls += 1
        else:
            self.guarded.append(action.tool)

    @staticmethod
    def _effect(graph: GraphSpec | None, action: ToolCall) -> str:
        """The tool's effect: a workflow's ``@forklab.tool`` recorded it on the call, a
        graph's tool declares it in the graph; unknown: a write (never counted as free)."""
        if action.effect is not None:
            return action.effect
        spec = (graph.tools or {}).get(action.tool) if graph is not None else None
        return spec.effect if spec is not None else "write"

    def _agent(self, graph: GraphSpec | None, node: Any, action: AgentAnswer) -> None:
        model = (action.model  # a workflow's code names its models: the recorded one
                 if graph is None or node is None or isinstance(node, WorkflowNode)
                 else _model_for(graph, node, action.role, action.index))
        tokens_in, tokens_out = action.input_tokens, action.output_tokens
        cost = self.prices.cost(model, tokens_in, tokens_out)
        self.est.live_calls += 1
        self.est.tokens += tokens_in + tokens_out
        if cost is None:
            self.unpriced.add(model)
        else:
            self.est.cost_usd += cost

    def _child(self, child: RunState) -> None:
        """A child run that runs again: its calls, priced at the models it recorded."""
        try:
            graph: GraphSpec | None = self.base.store.load_graph(child.graph_id)
        except ForklabError:
            graph = None
        for ex in child.executions:
            node = graph.node(ex.node) if graph and graph.has_node(ex.node) else None
            self.count(ex, node, graph)


def _from_call(records: Sequence[Any], call: str | None) -> Sequence[Any]:
    """``records`` from the first one of model or tool call ``call`` on (all when None,
    or when no record is of that call)."""
    if call is None:
        return records
    for i, record in enumerate(records):
        if isinstance(record, AgentAsked | ToolCall) and call_of(record) == call:
            return records[i:]
    return records


def _stale_targets(base: BaseRun, position: int) -> list[Target]:
    """Config targets an inherited execution at ``position`` ran without."""
    entries = base.index.entries
    holder = entries[position].run_id if position < len(entries) else base.run_id
    if holder == base.run_id:
        return []
    return config_targets([c for link in base.lineage.after(holder)
                           for c in link.own_changes()])


def estimate_tail(
    *, graph: GraphSpec, base: BaseRun, position: int, changes: Sequence[Change],
    applied: Sequence[Change], active: Sequence[Change], dirty: set[str], policy: Policy,
    memoize: bool, prices: PriceTable, call: str | None = None,
) -> Estimate:
    """Predict live calls, tokens and USD of the tail: the base's logical run from
    ``position`` on, under ``graph``, with ``changes`` (the request's), ``applied`` (every
    change applied at the point), ``active`` (every change the tail serves: the node-level
    ones of the whole lineage) and ``dirty`` input keys the point writes. ``call`` is a
    call-level point's key (``support#1/openai:3``): the calls its execution recorded
    before it are served from the log and not counted."""
    from_call = call.split("/", 1)[1] if call is not None and "/" in call else None
    walk = _Walk(graph=graph, policy=policy, prices=prices, base=base)
    targets = config_targets(changes)
    substituted = {c.node for c in active if isinstance(c, (OutputChange, ToolChange))}
    routes = {c.source for c in active if isinstance(c, RouteChange)}
    keys = _seed_keys(applied, dirty)
    human_changed = any(isinstance(c, HumanResponseChange) for c in active)
    for offset, ex in enumerate(base.state.executions[position:]):
        if not graph.has_node(ex.node):
            walk.est.warnings.append(f"node {ex.node!r} is not in the fork's graph")
            continue
        node = graph.node(ex.node)
        stale = _stale_targets(base, position + offset)
        affected = (any(t.node == ex.node for t in [*targets, *stale]) or ex.node in routes
                    or ex.node in substituted or bool(keys & set(node.reads))
                    or (human_changed and ex.kind == "approval"))
        if affected:
            keys |= set(ex.writes) | set(ex.deletes)
        if ex.node in substituted or (memoize and not affected):
            continue
        if isinstance(node, SubgraphNode) and not policy.allows(ex.node):
            continue  # served from the recording, or blocked: no call either way
        walk.count(ex, node, graph, from_call if offset == 0 else None)
    if walk.guarded:
        named = ", ".join(sorted(set(walk.guarded)))
        walk.est.warnings.append(
            f"{len(walk.guarded)} write tool call(s) ({named}) are not counted: " + (
                "the policy blocks side effects, so the first one stops the fork"
                if policy.blocks_all else
                "the side-effect guard serves each the base's recorded result when the base "
                "made it with the same arguments and blocks any other")
            + "; allow a tool to call it for real")
    for source in sorted(routes):
        if isinstance(graph.node(source), RouterNode):
            walk.est.warnings.append(
                f"route change at {source!r}: a branch the base never took is not in the "
                "estimate; its first side-effect node will be blocked unless allowed")
    if memoize:
        walk.est.warnings.append("memoize is on: nodes the change cannot reach are predicted "
                                 "to be served from the recording")
    walk.est.unpriced_models = sorted(walk.unpriced)
    return walk.est


__all__ = ["Estimate", "changed_input_keys", "estimate_tail"]
