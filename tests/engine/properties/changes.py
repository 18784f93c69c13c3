"""Random changes of every kind for a recorded generated run, and where each one bites.

``first_affected`` encodes SPEC §3.3 + semantics.md: the first execution (in the base's
logical run) whose behaviour a change can alter. A fork taken anywhere at or before that
execution must give the same variant (point independence).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from forklab.engine.fork import change
from forklab.engine.fork.changes import (
    ConfigChange,
    HumanResponseChange,
    InputPatchChange,
    MemoryChange,
    ModelChange,
    OutputChange,
    PromptChange,
    RouteChange,
    TemperatureChange,
    ToolChange,
)
from forklab.engine.graph import END, AgentNode, GraphSpec, RouterNode, SubgraphNode, ToolNode
from forklab.engine.state import Execution, RunState
from tests.engine.properties.graphs import GHOST, MEMORY_VALUES, VALUES
from tests.engine.properties.world import PRICED_MODELS

KINDS = ("model", "prompt", "temperature", "memory", "config", "route", "output", "tool",
         "human_response", "input_patch")
AGENT_KINDS = ("model", "prompt", "temperature")
CONFIG_KINDS = ("model", "prompt", "temperature", "config")


def agent_targets(graph: GraphSpec) -> list[str]:
    """Every address an agent change can name: nodes, roles, role instances."""
    targets = []
    for node in graph.nodes:
        if isinstance(node, AgentNode) and node.roles:
            for name, role in node.ordered_roles():
                targets.append(f"{node.id}.{name}")
                if role.count > 1:
                    targets += [f"{node.id}.{name}[{i}]" for i in range(role.count)]
        elif isinstance(node, (AgentNode, RouterNode)) and node.agent is not None:
            targets.append(node.id)
    return targets


def node_of(item: Any) -> str | None:
    """The node a node-scoped change names (None for memory, input and human changes)."""
    for attr in ("target", "node", "source"):
        value = getattr(item, attr, None)
        if isinstance(value, str):
            return value.split(".")[0]
    return None


def first_affected(item: Any, graph: GraphSpec, state: RunState) -> Execution | None:
    """The first execution of ``state`` a change can alter (None: none it ran)."""
    node = node_of(item)
    if node is not None:
        return next((e for e in state.executions if e.node == node), None)
    if isinstance(item, HumanResponseChange):
        return next((e for e in state.executions if e.kind == "approval"), None)
    if isinstance(item, MemoryChange):
        keys = set(item.set) | set(item.delete)
        return next((e for e in state.executions
                     if keys & set(graph.node(e.node).reads)
                     or keys & (set(e.writes) | set(e.deletes))), None)
    raise ValueError(f"{item.kind} changes have no single first affected node")


def affected_start(items: list[Any], graph: GraphSpec, state: RunState) -> int | None:
    """The start seq of the earliest execution any of ``items`` affects."""
    starts = [ex.start_seq for item in items
              if (ex := first_affected(item, graph, state)) is not None]
    return min(starts) if starts else None


@st.composite
def changes(draw: Any, graph: GraphSpec, state: RunState,
            kinds: tuple[str, ...] = KINDS) -> Any:
    """One valid change of a random kind among ``kinds`` that this graph can take."""
    makers = {kind: maker for kind, maker in _MAKERS.items() if kind in kinds}
    usable = [kind for kind, maker in makers.items() if maker[0](graph)]
    assume(usable)  # e.g. config changes of a graph of routers and gates only
    kind = draw(st.sampled_from(sorted(usable)))
    return makers[kind][1](draw, graph, state)


def _nodes(graph: GraphSpec, *types: type) -> list[Any]:
    return [n for n in graph.nodes if isinstance(n, types)]


def _agent_change(kind: str) -> Any:
    def make(draw: Any, graph: GraphSpec, state: RunState) -> Any:
        target = draw(st.sampled_from(agent_targets(graph)))
        if kind == "model":
            return change.model(target, draw(st.sampled_from(PRICED_MODELS)))
        if kind == "prompt":
            return change.prompt(target, draw(st.sampled_from(["Say less.", "Be bold.", ""])))
        return change.temperature(target, draw(st.sampled_from([0.0, 0.3, 1.2])))
    return make


def memory_keys(graph: GraphSpec, state: RunState) -> list[str]:
    keys = set(state.memory) | set(state.input) | {"extra"}
    for node in graph.nodes:
        keys |= set(node.reads) | set(node.writes)
    return sorted(keys)


def _memory(draw: Any, graph: GraphSpec, state: RunState) -> Any:
    key = draw(st.sampled_from(memory_keys(graph, state)))
    if draw(st.integers(0, 3)) == 0:
        return change.memory(delete=[key])
    return change.memory(set={key: draw(MEMORY_VALUES)})


def _config(draw: Any, graph: GraphSpec, state: RunState) -> Any:
    node = draw(st.sampled_from(_nodes(graph, ToolNode, AgentNode)))
    if isinstance(node, ToolNode):
        return change.config(node.id, {"params": {"salt": draw(st.integers(4, 9))}})
    used = draw(st.lists(st.sampled_from(node.reads), unique=True)) if node.reads else []
    return change.config(node.id, {"prompt": "Redo " + " ".join(f"{{{k}}}" for k in used)})


def router_targets(router: RouterNode) -> list[str]:
    targets = {rule.to for rule in router.rules} | set((router.choices or {}).values())
    return sorted(targets | {router.default or END, END})


def _route(draw: Any, graph: GraphSpec, state: RunState) -> Any:
    router = draw(st.sampled_from(_nodes(graph, RouterNode)))
    return change.route(router.id, draw(st.sampled_from(router_targets(router))),
                        once=draw(st.booleans()))


def _output(draw: Any, graph: GraphSpec, state: RunState) -> Any:
    node = draw(st.sampled_from(_nodes(graph, AgentNode, ToolNode, SubgraphNode)))
    keys = draw(st.lists(st.sampled_from(node.writes), unique=True)) if node.writes else []
    return change.output(node.id, {key: draw(VALUES) for key in keys})


def tool_result(draw: Any, node: ToolNode) -> Any:
    if len(node.writes) == 1:
        return draw(VALUES)
    return {key: draw(VALUES) for key in node.writes}


def _tool(draw: Any, graph: GraphSpec, state: RunState) -> Any:
    node = draw(st.sampled_from(_nodes(graph, ToolNode)))
    return change.tool(node.id, tool_result(draw, node))


def _human(draw: Any, graph: GraphSpec, state: RunState) -> Any:
    return change.human_response(draw(st.sampled_from(["approved", "rejected", "edited"])),
                                 data={"by": "change"})


def input_keys(graph: GraphSpec, state: RunState) -> list[str]:
    return sorted(set(state.input) | {GHOST, "fresh"})


def _input_patch(draw: Any, graph: GraphSpec, state: RunState) -> Any:
    keys = draw(st.lists(st.sampled_from(input_keys(graph, state)), min_size=1, max_size=2,
                         unique=True))
    return change.input_patch({key: draw(st.one_of(VALUES, st.none())) for key in keys})


_MAKERS: dict[str, tuple[Any, Any]] = {
    "model": (agent_targets, _agent_change("model")),
    "prompt": (agent_targets, _agent_change("prompt")),
    "temperature": (agent_targets, _agent_change("temperature")),
    "memory": (lambda g: True, _memory),
    "config": (lambda g: _nodes(g, ToolNode, AgentNode), _config),
    "route": (lambda g: _nodes(g, RouterNode), _route),
    "output": (lambda g: _nodes(g, AgentNode, ToolNode, SubgraphNode), _output),
    "tool": (lambda g: _nodes(g, ToolNode), _tool),
    "human_response": (lambda g: any(n.kind == "approval" for n in g.nodes), _human),
    "input_patch": (lambda g: True, _input_patch),
}


@dataclass(frozen=True)
class Target:
    """Which calls a config-type change targets: a node, a role, or one role instance."""

    node: str
    role: str | None = None
    index: int | None = None

    def covers(self, node: str, role: str | None, index: int | None) -> bool:
        if node != self.node:
            return False
        if self.role is None:
            return True
        return role == self.role and (self.index is None or index == self.index)


def targets_of(items: list[Any]) -> list[Target]:
    """The calls config-type changes target (semantics.md "Labels")."""
    found = []
    for item in items:
        if isinstance(item, (ModelChange, PromptChange, TemperatureChange)):
            node, _, rest = item.target.partition(".")
            role, _, index = rest.partition("[")
            found.append(Target(node, role or None, int(index[:-1]) if index else None))
        elif isinstance(item, ConfigChange):
            found.append(Target(item.node))
    return found


__all__ = ["AGENT_KINDS", "CONFIG_KINDS", "KINDS", "InputPatchChange", "OutputChange",
           "RouteChange", "Target", "ToolChange", "affected_start", "agent_targets", "changes",
           "first_affected", "input_keys", "memory_keys", "node_of", "router_targets",
           "targets_of", "tool_result"]
