"""Check changes against a graph and build the fork's effective graph.

Config-type changes (model, prompt, temperature, config) produce a new graph: an agent
change is scoped to the node (or role, or role instance) that names it by inlining a modified
copy of the agent there, so other nodes sharing that agent are untouched. State-type changes
are validated here and applied by the tail.

Every refusal is an :class:`InvalidChange` or :class:`ConflictingChanges` naming the change,
the target and what would have been accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from forklab.engine.answers import check_answer
from forklab.engine.canonical import merge_patch
from forklab.engine.errors import GraphValidationError, InvalidChange, indefinite
from forklab.engine.fork.changes import (
    TARGET,
    AgentChange,
    Change,
    ChangeBase,
    ConfigChange,
    HumanResponseChange,
    MessagesChange,
    OutputChange,
    ReplyChange,
    RerunChange,
    RouteChange,
    ToolChange,
    ToolResultChange,
)
from forklab.engine.fork.conflicts import check_conflicts
from forklab.engine.graph import (
    END,
    AgentNode,
    AgentSpec,
    ApprovalNode,
    GraphSpec,
    RouterNode,
    ToolNode,
    WorkflowNode,
    has_cycle,
)
from forklab.engine.tools import ToolRegistry

_TARGET = TARGET


def _modified(agent: AgentSpec, item: AgentChange) -> AgentSpec:
    """The agent with the change's settings (each agent kind says which: ``modified``)."""
    return item.modified(agent)


def agent_at(graph: GraphSpec, target: str) -> AgentSpec | None:
    """The agent an agent change's ``target`` addresses in ``graph`` (None: none there)."""
    match = _TARGET.match(target)
    node = graph.node(match["node"]) if match and graph.has_node(match["node"]) else None
    if match is None or node is None:
        return None
    if match["role"] is None:
        agent = getattr(node, "agent", None)
        return graph.resolve_agent(agent) if agent is not None else None
    role = node.roles.get(match["role"]) if isinstance(node, AgentNode) and node.roles else None
    if role is None:
        return None
    if match["i"] is None:
        return graph.resolve_agent(role.agent)
    index = int(match["i"])
    return graph.resolve_agent(role.agent_for(index)) if index < role.count else None


def _node_or_refuse(graph: GraphSpec, node_id: str, item: ChangeBase) -> Any:
    if not graph.has_node(node_id):
        raise InvalidChange(
            f"{item.kind} change: graph {graph.id!r} has no node {node_id!r}; nodes: "
            f"{', '.join(graph.node_ids())}",
            kind=item.kind, target=node_id,
        )
    return graph.node(node_id)


def _apply_agent(graph: GraphSpec, item: AgentChange) -> GraphSpec:
    match = _TARGET.match(item.target)
    if not match:
        raise InvalidChange(f"{item.kind} change: cannot read target {item.target!r}; use "
                            "'node', 'node.role' or 'node.role[i]'", target=item.target)
    node = _node_or_refuse(graph, match["node"], item)
    if isinstance(node, WorkflowNode) and match["role"] is None and item.kind != "tools":
        # a workflow's code makes its calls: the setting applies to every one (SPEC §7)
        return _replace_node(graph, node.model_copy(update=item.agent_update()))
    role_name: str | None = match["role"]
    index: str | None = match["i"]
    drives_agent = isinstance(node, AgentNode) or (isinstance(node, RouterNode) and node.agent)
    if not drives_agent:
        raise InvalidChange(
            f"{item.kind} change: node {node.id!r} is {indefinite(node.kind)} node and drives no "
            "agent; "
            "it takes a memory or output change instead",
            kind=item.kind, target=item.target,
        )
    if role_name is None:
        if isinstance(node, AgentNode) and node.roles:
            names = ", ".join(f"{node.id}.{r}" for r in node.roles)
            raise InvalidChange(
                f"{item.kind} change: node {node.id!r} drives several roles; address one of: "
                f"{names} (or one instance, e.g. {node.id}.{next(iter(node.roles))}[0])",
                kind=item.kind, target=item.target,
            )
        agent = _modified(graph.resolve_agent(node.agent), item)
        return _replace_node(graph, node.model_copy(update={"agent": agent}))
    roles = node.roles if isinstance(node, AgentNode) else None
    if not roles or role_name not in roles:
        raise InvalidChange(
            f"{item.kind} change: node {node.id!r} has no role {role_name!r}; roles: "
            f"{', '.join(roles or {}) or 'none'}",
            kind=item.kind, target=item.target,
        )
    role = roles[role_name]
    if index is None:
        instances = {i: _modified(a, item) for i, a in role.instances.items()}
        new_role = role.model_copy(update={
            "agent": _modified(graph.resolve_agent(role.agent), item), "instances": instances,
        })
    else:
        i = int(index)
        if i >= role.count:
            raise InvalidChange(
                f"{item.kind} change: role {node.id}.{role_name} has {role.count} instance(s); "
                f"index {i} is out of range (0..{role.count - 1})",
                kind=item.kind, target=item.target,
            )
        agent = _modified(graph.resolve_agent(role.agent_for(i)), item)
        new_role = role.model_copy(update={"instances": {**role.instances, i: agent}})
    return _replace_node(graph, node.model_copy(update={"roles": {**roles, role_name: new_role}}))


def _replace_node(graph: GraphSpec, node: Any) -> GraphSpec:
    """Swap one node in; only that node (and the cycle check, if its targets moved) is
    validated again — see :meth:`GraphSpec.with_node` for why that is sound."""
    return graph.with_node(node)


def _apply_config(graph: GraphSpec, item: ConfigChange) -> GraphSpec:
    node = _node_or_refuse(graph, item.node, item)
    for fixed in ("id", "kind"):
        if fixed in item.patch and item.patch[fixed] != getattr(node, fixed):
            raise InvalidChange(f"config change of {node.id!r}: '{fixed}' cannot change",
                                kind="config", target=node.id, field=fixed)
    patched = merge_patch(node.model_dump(mode="json", by_alias=True), item.patch)
    try:
        return graph.with_node(patched)
    except GraphValidationError as exc:
        raise InvalidChange(f"config change of {node.id!r} makes the graph invalid: "
                            f"{exc.message}", kind="config", target=node.id) from None


def _check_state_change(graph: GraphSpec, item: Change) -> None:
    match item:
        case OutputChange():
            node = _node_or_refuse(graph, item.node, item)
            if isinstance(node, RouterNode):
                raise InvalidChange(f"output change: {node.id!r} is a router; force its "
                                    "decision with a route change", target=node.id)
            if isinstance(node, ApprovalNode):
                raise InvalidChange(f"output change: {node.id!r} is an approval gate; answer "
                                    "it with a human_response change", target=node.id)
            extra = sorted(set(item.memory) - set(node.writes))
            if extra:
                raise InvalidChange(
                    f"output change of {node.id!r}: it writes {node.writes}, not {extra}",
                    target=node.id, kind="output",
                )
        case ToolChange():
            node = _node_or_refuse(graph, item.node, item)
            if not isinstance(node, ToolNode):
                raise InvalidChange(f"tool change: {node.id!r} is {indefinite(node.kind)} node, "
                                    "not a tool; use an output change", target=node.id, kind="tool")
        case RouteChange():
            node = _node_or_refuse(graph, item.source, item)
            if not isinstance(node, RouterNode):
                raise InvalidChange(f"route change: {node.id!r} is {indefinite(node.kind)} node, "
                                    "not a router", target=node.id, kind="route")
            if item.to != END and not graph.has_node(item.to):
                raise InvalidChange(f"route change: unknown target {item.to!r}; expected one "
                                    f"of {', '.join([*graph.node_ids(), END])}", kind="route")
            if (not item.once and graph.max_iterations is None
                    and has_cycle(graph, ((item.source, item.to),))):
                raise InvalidChange(
                    f"route change {item.source!r} -> {item.to!r} closes a loop in graph "
                    f"{graph.id!r}, which sets no max_iterations: forced every time, it would "
                    "never end; force it once (once=True)", kind="route", target=node.id)
        case ReplyChange() | ToolResultChange() | RerunChange() | MessagesChange():
            _check_call_change(graph, item)
        case HumanResponseChange() if item.call is not None:
            _check_call_change(graph, item)  # one tool call's gate
        case HumanResponseChange():
            if item.node is not None:
                gate = _node_or_refuse(graph, item.node, item)
                if not isinstance(gate, ApprovalNode):
                    raise InvalidChange(
                        f"human_response change: {gate.id!r} is {indefinite(gate.kind)} node, "
                        "not an approval gate", kind="human_response", target=gate.id)
            if not any(isinstance(n, ApprovalNode) for n in graph.nodes):
                raise InvalidChange(f"human_response change: graph {graph.id!r} has no "
                                    "approval gate", kind="human_response")
            check_human_response(graph, item)
        case _:
            pass


def check_human_response(graph: GraphSpec, item: HumanResponseChange, *,
                         inherited: bool = False) -> None:
    """A ``human_response`` change answers every approval gate its tail reaches (it names
    none), so each key its ``memory_updates`` set must be one every gate of ``graph`` (the
    fork's effective graph) declares for answers — refused here, at preflight, with
    ``invalid_overrides`` (:func:`~forklab.engine.answers.check_answer`)."""
    if not item.memory_updates:
        return
    what = ("the inherited human_response change answering" if inherited
            else "a human_response change answering")
    for node in graph.nodes:
        if isinstance(node, ApprovalNode):
            check_answer(node, item.memory_updates, what=what, kind="human_response", fix=(
                f" — in the graph, or with a config change of {node.id!r} in this fork"
                + ("; or give this fork its own human_response change" if inherited else "")))


def check_inherited_answer(graph: GraphSpec, inherited: Sequence[Change],
                           changes: Sequence[Change]) -> None:
    """A fork of a fork answers its gates with the last ``human_response`` of its lineage:
    when ``changes`` (this request's) hold none, the inherited one must still write only keys
    the gates of ``graph`` (this fork's effective graph, which a config change of a gate may
    have altered) declare."""
    if any(isinstance(item, HumanResponseChange) for item in changes):
        return  # this request's own answer replaces it, checked with the request
    humans = [item for item in inherited if isinstance(item, HumanResponseChange)]
    if humans:
        check_human_response(graph, humans[-1], inherited=True)


def effective_graph(graph: GraphSpec, changes: Sequence[Change], *,
                    one_request: bool = True) -> GraphSpec:
    """Validate every change against ``graph`` and return the graph the tail runs under.

    ``changes`` of one request are first checked for conflicts; ``one_request=False``
    applies a lineage's requests in order instead, a later change replacing an earlier one
    that wrote the same thing (a refinement).
    """
    if one_request:
        check_conflicts(changes)
    for item in changes:
        if isinstance(item, AgentChange) and item.call is None:
            graph = _apply_agent(graph, item)
        elif isinstance(item, ConfigChange):
            graph = _apply_config(graph, item)
    # state changes are checked against the graph the tail runs under, whatever the order
    # of the list: a config change declaring the key a human_response sets comes before or
    # after it alike
    for item in changes:
        if isinstance(item, AgentChange) and item.call is not None:
            _check_call_change(graph, item)
        elif not isinstance(item, (AgentChange, ConfigChange)):
            _check_state_change(graph, item)
    return graph


def _check_call_change(graph: GraphSpec, item: ChangeBase) -> None:
    """A per-call change names a call of a node that drives an agent: refused up front when
    the node does not exist or calls no model (a tool node takes a ``tool`` change)."""
    address = item.call_address()
    assert address is not None
    node = _node_or_refuse(graph, address.node, item)
    if not isinstance(node, (AgentNode, RouterNode, WorkflowNode)):  # a workflow's calls:
        raise InvalidChange(  # its vendor client calls and @forklab.tool calls (SPEC §7)
            f"{item.kind} change: {node.id!r} is {indefinite(node.kind)} node and makes no "
            f"model or tool call of its own; "
            + ("use a tool change" if isinstance(node, ToolNode) else "use an output change"),
            kind=item.kind, target=node.id)
    if isinstance(node, RouterNode) and not address.call.startswith("turn:1"):
        raise InvalidChange(f"{item.kind} change: router {node.id!r} makes one call "
                            "(turn:1)", kind=item.kind, target=node.id)


def check_tool_changes(graph: GraphSpec, changes: Sequence[Change], tools: ToolRegistry) -> None:
    """A config change that points a tool node at another tool must name one the
    environment can run (under ``FORKLAB_TOOL_MODULES``): refused now with
    ``unknown_tool``, not when the tail reaches the node. ``graph`` is the effective graph."""
    for item in changes:
        if isinstance(item, ConfigChange) and "tool" in item.patch:
            node = graph.node(item.node)
            if isinstance(node, ToolNode):
                tools.resolve(node.tool)


@dataclass(frozen=True, slots=True)
class Target:
    """What a config-type change targets: a node, one role of it, or one role instance."""

    node: str
    role: str | None = None
    index: int | None = None

    def covers(self, node: str, role: str | None, index: int | None) -> bool:
        """Whether a call of ``node`` as ``role[index]`` is one this change targets."""
        if node != self.node:
            return False
        if self.role is None:
            return True
        return role == self.role and (self.index is None or index == self.index)


def config_targets(changes: Sequence[Change]) -> list[Target]:
    """What the config-type changes target (their calls are labelled ``changed``)."""
    targets = []
    for item in changes:
        if isinstance(item, AgentChange) and item.call is None:
            match = _TARGET.match(item.target)
            if match is not None:
                index = None if match["i"] is None else int(match["i"])
                targets.append(Target(match["node"], match["role"], index))
        elif isinstance(item, ConfigChange):
            targets.append(Target(item.node))
    return targets


def target_nodes(changes: Sequence[Change]) -> set[str]:
    """Nodes a config-type change targets."""
    return {t.node for t in config_targets(changes)}
