"""Graph definitions as data.

A graph is a pydantic model loadable from JSON or YAML. Structural errors (wrong types,
missing fields) and cross-reference errors (an edge to a node that does not exist, a cycle
without ``max_iterations``) are both raised as :class:`GraphValidationError` subclasses whose
message names the node and the field at fault.

Invariants a valid graph guarantees to the runner:
- node ids are unique and every reference (start, edges, router targets, ``on_reject``,
  agent ids, role ``writes``) names something that exists;
- a graph containing a cycle declares ``max_iterations`` (loops are always bounded);
- every ``{key}`` placeholder in a prompt template is a key the node declares in ``reads``;
- a node observes only its read slice: router rules test only keys in the router's ``reads``
  (or ``$iteration``), and subgraph ``input`` mappings map only keys in the node's ``reads``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from forklab.engine.canonical import (
    canonical_json,
    canonical_json_stripped,
    fingerprint,
    fingerprint_unless_null,
    loads,
    orjson_canonical,
    unchecked_canonical,
)
from forklab.engine.collector import collector_paused
from forklab.engine.errors import GraphValidationError, UnboundedCycleError, UnknownNodeReference
from forklab.engine.graph_index import GraphIndex

END = "end"
"""Reserved target name meaning "finish the run" in router rules and ``on_reject``."""

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ID = r"^[A-Za-z_][A-Za-z0-9_\-]*$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


DEFAULT_MAX_TURNS = 8


class ToolSpec(_Model):
    """A tool the model may choose (the graph-level ``tools:`` registry, SPEC §6.1).

    ``fn`` is called as ``fn(args, ctx)`` like a tool node's callable. ``parameters`` is
    the JSON Schema the model is offered; omitted, it is derived from ``fn``'s typed first
    parameter when the tool is first offered (:mod:`forklab.engine.toolbox`)."""

    fn: str = Field(pattern=r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")
    effect: Literal["read", "write"] = "read"
    trusted: bool = True
    description: str = ""
    parameters: dict[str, Any] | None = None
    approval: bool = False


class ToolChoiceName(_Model):
    """``tool_choice: {name: refund}``: the model must call that tool."""

    name: str = Field(pattern=_ID)



class AgentSpec(_Model):
    """One agent: which provider and model, how it is prompted and sampled."""

    provider: str = "scripted"
    model: str = "scripted-small"
    system_prompt: str = ""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=256, ge=1, le=100_000)
    latency_ms: int = Field(default=0, ge=0, description="Simulated latency (scripted only).")
    params: dict[str, Any] = Field(default_factory=dict)
    # The tool loop (SPEC §6.1). Every field defaults to None, which a stored form and a
    # fingerprint leave out: an agent that uses none of them hashes as it always did.
    tools: list[Annotated[str, Field(pattern=_ID)]] | None = Field(
        default=None, description="Names from the graph's 'tools' the model may call.")
    tool_choice: Literal["auto", "required", "none"] | ToolChoiceName | None = Field(
        default=None, description="auto | required | none | {name: TOOL}; unset: auto.")
    parallel_tool_calls: bool | None = Field(
        default=None, description="Whether one turn may ask for several tool calls.")
    max_turns: int | None = Field(
        default=None, ge=1, le=100,
        description="Model turns in one node execution (default 8); more fails the node.")
    response_format: dict[str, Any] | None = Field(
        default=None, description="A JSON Schema: the final answer is parsed and validated.")

    @property
    def turn_limit(self) -> int:
        return self.max_turns or DEFAULT_MAX_TURNS


AgentRef = Annotated[str, Field(pattern=_ID)] | AgentSpec
"""An agent is referenced by id (from ``GraphSpec.agents``) or defined inline."""


class RoleSpec(_Model):
    """A named role inside a multi-agent node; ``count > 1`` makes ``role[i]`` addressable."""

    agent: AgentRef
    count: int = Field(default=1, ge=1, le=32)
    choices: list[str] | None = None
    writes: str | None = Field(default=None, description="Memory key for this role's answer.")
    instances: dict[int, AgentSpec] = Field(
        default_factory=dict,
        description="Per-instance agent overrides (index -> agent), e.g. one voter's model.",
    )

    def agent_for(self, index: int) -> AgentRef:
        """The agent driving instance ``index`` (an override, else the role's agent)."""
        return self.instances.get(index, self.agent)


ITERATION_KEY = "$iteration"
"""The loop counter a router rule may test without declaring it in ``reads``."""


class Condition(_Model):
    """A test over one memory key (or ``$iteration``)."""

    key: str
    op: Literal[
        "eq", "ne", "in", "not_in", "gt", "gte", "lt", "lte", "exists", "truthy", "falsy",
        "contains",
    ] = "eq"
    value: Any = None


class RouteRule(_Model):
    when: list[Condition] = Field(min_length=1, description="All conditions must hold.")
    to: str


class _NodeBase(_Model):
    id: str = Field(pattern=_ID)
    reads: list[str] = Field(default_factory=list)
    writes: list[str] = Field(default_factory=list)
    description: str = ""
    join: Literal["any", "all"] = Field(
        default="any",
        description="'all' waits for every predecessor before running (a join).",
    )


class AgentNode(_NodeBase):
    """Drives one agent (``agent``) or several under named ``roles``."""

    kind: Literal["agent"] = "agent"
    agent: AgentRef | None = None
    roles: dict[str, RoleSpec] | None = None
    role_order: list[str] | None = Field(
        default=None,
        description="Order the roles run in; defaults to the order of 'roles' as written. "
        "Stored explicitly because JSON object order does not survive every database.",
    )
    prompt: str = ""
    choices: list[str] | None = None
    output: Literal["text", "json"] = "text"
    history: str | None = Field(
        default=None,
        description="A memory key holding the conversation: read as the messages before this "
                    "node's prompt, written back with this node's turns (listed in both "
                    "'reads' and 'writes').")

    def model_post_init(self, __context: Any) -> None:
        if self.roles and self.role_order is None:
            object.__setattr__(self, "role_order", list(self.roles))

    def ordered_roles(self) -> list[tuple[str, RoleSpec]]:
        """Roles in execution order."""
        roles = self.roles or {}
        return [(name, roles[name]) for name in (self.role_order or list(roles))]


class ToolNode(_NodeBase):
    """Calls a registered Python callable by dotted path."""

    kind: Literal["tool"] = "tool"
    tool: str = Field(pattern=r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")
    effect: Literal["read", "write"] = "read"
    trusted: bool = True
    params: dict[str, Any] = Field(default_factory=dict)


class RouterNode(_NodeBase):
    """Chooses the next node: the first matching rule, else ``default``; or an agent's answer."""

    kind: Literal["router"] = "router"
    rules: list[RouteRule] = Field(
        default_factory=list,
        description="Tested in order; a rule may test only keys in 'reads' (or '$iteration').")
    default: str | None = None
    agent: AgentRef | None = None
    prompt: str = ""
    choices: dict[str, str] | None = Field(
        default=None, description="Agent answer -> target node (agent routing)."
    )


class ApprovalNode(_NodeBase):
    """A human gate: the run pauses until approved, rejected or edited. Its first ``writes``
    key receives the decision; the keys after it are the only ones an answer's
    ``memory_updates`` may set (:mod:`forklab.engine.answers`)."""

    kind: Literal["approval"] = "approval"
    writes: list[str] = Field(
        default_factory=list,
        description="The first key receives the decision; the keys after it are the only "
                    "ones an answer's memory_updates may set.")
    prompt: str = "Approve?"
    on_reject: str = END


class SubgraphNode(_NodeBase):
    """Runs another graph as a child run; ``input``/``output`` map keys across."""

    kind: Literal["subgraph"] = "subgraph"
    graph: str
    input: dict[str, str] = Field(
        default_factory=dict,
        description="child key -> memory key; each memory key must be in the node's 'reads'")
    output: dict[str, str] = Field(default_factory=dict, description="memory key -> child key")


class WorkflowNode(_NodeBase):
    """Runs a registered code-first workflow (SPEC §7): ``fn`` is ``module:function``, called
    with its ``reads`` as keyword arguments; its return value is written to its one
    ``writes`` key. Every model call through an official vendor client and every
    ``@forklab.tool`` call it makes is a call of this node (``engine.workflow_node``)."""

    kind: Literal["workflow"] = "workflow"
    fn: str = Field(pattern=r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
    writes: list[str] = Field(default_factory=lambda: ["output"], min_length=1, max_length=1)
    # Settings for every model call the code makes, over what the code asks (a fork's
    # node-wide model / prompt / temperature change sets them; unset: the code's own).
    provider: str | None = Field(default=None, description="Every model call's provider.")
    model: str | None = Field(default=None, description="Every model call's model.")
    system_prompt: str | None = Field(default=None,
                                      description="Every model call's system prompt.")
    temperature: float | None = Field(default=None, ge=0.0, le=2.0,
                                      description="Every model call's temperature.")


Node = Annotated[
    AgentNode | ToolNode | RouterNode | ApprovalNode | SubgraphNode | WorkflowNode,
    Field(discriminator="kind"),
]
NODE_KINDS = ("agent", "tool", "router", "approval", "subgraph", "workflow")


class Edge(_Model):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    source: str = Field(alias="from")
    target: str = Field(alias="to")


class GraphSpec(_Model):
    """A declarative workflow. See ``docs/graph-format.md``."""

    id: str = Field(pattern=_ID)
    name: str = ""
    description: str = ""
    start: str
    nodes: list[Node] = Field(min_length=1)
    edges: list[Edge] = Field(default_factory=list)
    agents: dict[str, AgentSpec] = Field(
        default_factory=dict, description="Run-scoped agent registry (inline definitions)."
    )
    tools: dict[Annotated[str, Field(pattern=_ID)], ToolSpec] | None = Field(
        default=None, description="Tools agents may choose to call, by name.")
    max_iterations: int | None = Field(default=None, ge=1, le=10_000)
    max_concurrency: int | None = Field(
        default=None, ge=1, le=256,
        description="How many nodes of one run may execute at once (ready, independent "
        "branches); unset: the environment's default (FORKLAB_MAX_CONCURRENCY, else 16). "
        "The log is the same whatever the value.")

    @field_validator("nodes")
    @classmethod
    def _unique_ids(cls, nodes: list[Any]) -> list[Any]:
        seen: set[str] = set()
        for node in nodes:
            if node.id in seen:
                raise ValueError(f"node id {node.id!r} is used twice; node ids must be unique")
            seen.add(node.id)
        return nodes

    def model_post_init(self, __context: Any) -> None:
        check_references(self)

    # -- lookups (indexed once per graph version; see graph_index) -------------------------
    @cached_property
    def index(self) -> GraphIndex:
        """Node, successor and predecessor tables, built on first use and kept (the spec is
        frozen, so they never go stale; :meth:`model_copy` drops them)."""
        return GraphIndex.build(self.nodes, self.edges)

    @cached_property
    def content_hash(self) -> str:
        """Hash of the stored form (what ``run.started`` records as ``graph_hash``): the
        :func:`~forklab.engine.canonical.fingerprint` of :meth:`to_wire`.

        Its canonical JSON drops every ``None``-valued key. Pydantic's ``exclude_none``
        drops the models' ``None`` fields in Rust, twice as fast as walking the wire form;
        it keeps ``None`` inside free-form values (``params``), so when the result holds a
        ``null`` anywhere the wire form is walked instead. Same text either way.
        """
        passed = self.__dict__.pop("_nodes_dump", None)
        if passed is None:
            dumped = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        else:  # the fingerprint-parts pass dumped the nodes as here: only the rest is left
            dumped = self.model_dump(mode="json", by_alias=True, exclude_none=True,
                                     exclude={"nodes"})
            dumped["nodes"] = passed
        found = fingerprint_unless_null(dumped)  # refused: a wide integer, say
        if found is None:
            return fingerprint(self.to_wire())
        known = self.__dict__.get("_fingerprint_parts")
        if passed is None and len(self.nodes) > PER_NODE_FIRST and not (
                known is not None and known.complete):
            # the one fingerprint-parts pass, if it comes, starts from these nodes (a fork's
            # graph is hashed when the fork opens, then its tail serves its nodes)
            self.__dict__["_nodes_dump"] = dumped["nodes"]
        return found

    def model_copy(self, *, update: Any = None, deep: bool = False) -> GraphSpec:
        copied = super().model_copy(update=update, deep=deep)
        if update:  # cached lookups describe the old fields
            for name in _CACHED:
                copied.__dict__.pop(name, None)
        return copied

    @cached_property
    def _fingerprint_parts(self) -> _KnownParts:
        """The nodes' fingerprint parts computed so far (see :meth:`fingerprint_parts`)."""
        return _KnownParts()

    def fingerprint_parts(self, node_id: str) -> FingerprintParts:
        """The canonical JSON of the node's config and agents (the parts of its fingerprint
        that do not depend on the execution), serialised once per graph version.

        The first :data:`PER_NODE_FIRST` nodes asked are serialised one by one; the next
        miss serialises every node :func:`_bulk_fingerprint_parts` can write in one pass. A
        run that executes a few nodes (a fork before the last node of a chain) so never
        pays for all of them, and one that executes many pays the one pass. Both paths
        write the same text, character for character (tests compare them)."""
        known = self._fingerprint_parts
        parts = known.parts.get(node_id)
        if parts is None and not known.complete and len(known.parts) >= PER_NODE_FIRST:
            known.complete = True
            # a bounded pass over the whole graph whose texts live as long as it does: the
            # collector would otherwise rescan its dump's containers (~2 ms per 1,000 nodes)
            with collector_paused():
                known.parts.update(_bulk_fingerprint_parts(self))
            parts = known.parts.get(node_id)
        if parts is None:
            node = self.node(node_id)
            config = node.model_dump(mode="json", exclude={"description"})
            parts = _inline_agent_parts(node, config) or FingerprintParts(
                config=canonical_json(config), agents=canonical_json(node_agents(self, node)))
            known.parts[node_id] = parts
        return parts

    def node(self, node_id: str) -> (AgentNode | ToolNode | RouterNode | ApprovalNode
                                     | SubgraphNode | WorkflowNode):
        found = self.index.nodes.get(node_id)
        if found is None:
            raise UnknownNodeReference(
                f"graph {self.id!r} has no node {node_id!r}; nodes: {', '.join(self.node_ids())}",
                node=node_id,
            )
        return found  # type: ignore[no-any-return]

    def has_node(self, node_id: str) -> bool:
        return node_id in self.index.nodes

    def node_ids(self) -> list[str]:
        return list(self.index.nodes)

    def successors(self, node_id: str) -> list[str]:
        return list(self.index.successors.get(node_id, ()))

    def predecessors(self, node_id: str) -> list[str]:
        return list(self.index.predecessors.get(node_id, ()))

    def with_node(self, node: Any) -> GraphSpec:
        """This graph with the node of ``node``'s id replaced, validating only what changed.

        Sound because every check but one looks at a single node together with the set of
        node ids and the agent registry, and a replacement keeps the id (so the edges, the
        start node and every other node's references stay valid). The exception is the cycle
        check: it runs again only when the graph has no ``max_iterations`` and the node's
        targets changed. Raises :class:`GraphValidationError` like :func:`parse_graph`.
        """
        data = node.model_dump(mode="json", by_alias=True) if isinstance(node, BaseModel) \
            else node
        node = _validate_node(data, self.id)  # a model_copy'd node was never validated
        old = self.node(node.id)
        if node.kind != old.kind:
            raise GraphValidationError(
                f"node {node.id!r}, field 'kind': a replacement keeps the kind "
                f"({old.kind}); got {node.kind}", node=node.id, field="kind")
        _check_node(self, node, self.index.nodes.keys())
        position = self.index.position[node.id]
        nodes = [*self.nodes[:position], node, *self.nodes[position + 1:]]
        graph = self.model_copy(update={"nodes": nodes})
        graph.__dict__["index"] = self.index.with_node(node)
        read_from = self.__dict__.get("_read_from")
        if read_from is not None:  # the stored form, this node's dump in its place
            graph.__dict__["_read_from"] = (read_from[0], {
                **read_from[1], position: node.model_dump(mode="json", by_alias=True)})
        known = self.__dict__.get("_fingerprint_parts")
        if known is not None:  # agents resolve in the unchanged registry
            graph.__dict__["_fingerprint_parts"] = known.without(node.id)
        if self.max_iterations is None and _targets(node) != _targets(old) and has_cycle(graph):
            raise UnboundedCycleError(
                f"node {node.id!r}: its targets make a cycle in graph {self.id!r}, which sets "
                "no 'max_iterations'; loops must be bounded", node=node.id,
                field="max_iterations")
        return graph

    def resolve_agent(self, ref: AgentRef) -> AgentSpec:
        if isinstance(ref, AgentSpec):
            return ref
        return self.agents[ref]

    def to_wire(self) -> dict[str, Any]:
        """JSON-ready dict (``from``/``to`` edge keys), the stored form of a graph version."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=False)

    def shared_wire(self) -> dict[str, Any]:
        """A stored form of this graph that shares the nodes of the form it was read from.

        A graph read from a stored form (:func:`parse_stored_graph`) keeps that decoded dict,
        and one derived from it by :meth:`with_node` keeps it with the replaced node's dump
        in that node's place. Then this is a new top-level dict and node list whose other
        nodes are the stored form's own dicts — read-only for everyone, as that form is —
        instead of a dump of every node (~3.7 ms for 1,002 nodes; a fork's ``run.forked``
        carries its graph, and a store diffing it against the stored version finds the
        shared nodes equal at a glance). It parses to this graph, as the form it was read
        from does; it equals :meth:`to_wire` whenever that form was written by
        :meth:`to_wire` (a stored version: tests). A graph read from nothing stored:
        :meth:`to_wire`.
        """
        read_from = self.__dict__.get("_read_from")
        if read_from is None:
            return self.to_wire()
        stored, replaced = read_from
        nodes = list(stored["nodes"])
        for position, node in replaced.items():
            nodes[position] = node
        return {**stored, "nodes": nodes}


_CACHED = ("index", "content_hash", "_fingerprint_parts", "_nodes_dump", "_read_from")
"""Attributes derived from the fields, dropped by :meth:`GraphSpec.model_copy` with an update
(``_nodes_dump``: the nodes of :attr:`GraphSpec.content_hash`'s dump, kept by whichever of
the hash and the one fingerprint-parts pass comes first for the other, which takes it —
:func:`_dump_nodes`; ``_read_from``: the stored form the graph was read from and the nodes
:meth:`GraphSpec.with_node` replaced since, by position — :meth:`GraphSpec.shared_wire`)."""


class FingerprintParts(NamedTuple):
    """Canonical JSON texts of a node's config (description aside) and of its agents."""

    config: str
    agents: str


PER_NODE_FIRST = 8
"""How many nodes' fingerprint parts a graph serialises one by one before one pass writes
them all (:meth:`GraphSpec.fingerprint_parts`)."""


class _KnownParts:
    """A graph's fingerprint parts by node id, and whether the one pass has filled them.

    Only ever added to (a graph version's parts never change), so threads sharing a graph
    may fill it together: at worst two of them serialise the same node, to the same text."""

    __slots__ = ("complete", "parts")

    def __init__(self, parts: dict[str, FingerprintParts] | None = None,
                 complete: bool = False) -> None:
        self.parts = parts or {}
        self.complete = complete

    def without(self, node_id: str) -> _KnownParts:
        """What a graph with ``node_id`` replaced still knows (its other nodes' parts).

        ``dict()`` copies in one step under the GIL, so a thread adding parts meanwhile
        (a run of the same cached graph) cannot break the copy as iterating would."""
        parts = dict(self.parts)
        parts.pop(node_id, None)
        return _KnownParts(parts, self.complete)


def _inline_agent_parts(node: Any, config: dict[str, Any],
                        encode: Callable[[Any], str] = canonical_json) -> FingerprintParts | None:
    """The parts of a node that drives one inline agent (most agent nodes): the config's
    text and ``{"agent": A}`` with ``A`` the agent's text, each written by ``encode`` in one
    C pass. Equal to the general path's texts, character for character (tests compare
    them): the general path resolves the same inline agent to the same dump. None for any
    other node."""
    agent = config.get("agent")
    if (not isinstance(node, (AgentNode, RouterNode)) or not isinstance(node.agent, AgentSpec)
            or getattr(node, "roles", None) or not isinstance(agent, dict)
            or node.agent.tools):  # its tools' specs are part of it: node_agents
        return None
    return FingerprintParts(config=encode(config), agents='{"agent":' + encode(agent) + "}")


def _dump_nodes(graph: GraphSpec) -> list[dict[str, Any]]:
    """The nodes of :attr:`GraphSpec.content_hash`'s dump of ``graph`` (``None`` fields
    left out), which the fingerprint-parts pass starts from too: whichever of the two runs
    first keeps it for the other (``_nodes_dump``), which takes it — a fork's graph is
    hashed as its opening is built, and its tail's first prediction may come first. Each
    runs once per graph, so a graph holds at most one such dump, and one whose hash is
    never asked (a dry run's estimate) holds it as long as the graph lives (beside the
    stored form a cached version keeps anyway: ``_read_from``)."""
    nodes: list[dict[str, Any]] = graph.model_dump(
        mode="json", by_alias=True, exclude_none=True, include={"nodes": True})["nodes"]
    return nodes


def _bulk_fingerprint_parts(graph: GraphSpec) -> dict[str, FingerprintParts]:
    """The fingerprint parts of every node of ``graph`` that drives no agent or one inline
    agent (a fan-out's workers, a chain's steps), from one dump of all the nodes.

    The per-node path dumps each node (a pydantic call per node) and walks the dump in
    Python to drop ``None``-valued keys (:func:`~forklab.engine.canonical.canonical_json`).
    Here pydantic's ``exclude_none`` drops the models' ``None`` fields in Rust for all nodes
    at once, and the texts are written by the shared C encoder. ``exclude_none`` keeps
    ``None`` inside free-form values (``params``) where ``canonical_json`` would drop it
    from a mapping: a node whose texts hold ``null`` anywhere is left to the per-node path,
    as is a node with a registry agent or roles. So every text equals the per-node one,
    character for character (tests compare them on every node of several graphs).
    """
    nodes = graph.__dict__.pop("_nodes_dump", None)
    if nodes is None:
        nodes = _dump_nodes(graph)
        if "content_hash" not in graph.__dict__:  # the hash, when it comes, starts from it
            graph.__dict__["_nodes_dump"] = nodes
    dumped = []
    for node in nodes:  # copies (the hash may share ``nodes``): a C copy, then one key off
        config = dict(node)
        config.pop("description", None)
        dumped.append(config)
    # the texts below are parts of the dump's: checked once for all (orjson_canonical)
    encode = (canonical_json_stripped if orjson_canonical(dumped) is None
              else unchecked_canonical)
    parts: dict[str, FingerprintParts] = {}
    for node, config in zip(graph.nodes, dumped, strict=True):
        agent = config.get("agent")
        if agent is None and not getattr(node, "roles", None):
            text = encode(config)
            if "null" not in text:
                parts[node.id] = FingerprintParts(config=text, agents="{}")
        elif isinstance(agent, dict) and isinstance(getattr(node, "agent", None), AgentSpec):
            found = _inline_agent_parts(node, config, encode)
            if found is not None and "null" not in found.config:
                parts[node.id] = found
    return parts


def node_agents(graph: GraphSpec, node: Any) -> dict[str, Any]:
    """Every agent ``node`` drives, resolved (``agent``, or ``role[i]`` per instance)."""
    agents: dict[str, Any] = {}
    if isinstance(node, (AgentNode, RouterNode)) and node.agent is not None:
        agents["agent"] = graph.resolve_agent(node.agent).model_dump(mode="json")
    if isinstance(node, AgentNode) and node.roles:
        for name, role in node.roles.items():
            for i in range(role.count):
                agents[f"{name}[{i}]"] = graph.resolve_agent(role.agent_for(i)).model_dump(
                    mode="json")
    offered = sorted({tool for agent in agents.values() for tool in agent.get("tools") or ()})
    if offered:  # what the model is offered is part of what the node does
        agents["$tools"] = {name: (graph.tools or {})[name].model_dump(mode="json")
                            for name in offered}
    return agents
_NODE_ADAPTER: TypeAdapter[Any] = TypeAdapter(Node)


def _validate_node(data: Any, graph_id: str) -> Any:
    """One node validated from plain data, errors worded like :func:`parse_graph`'s."""
    try:
        return _NODE_ADAPTER.validate_python(data)
    except ValidationError as exc:
        message = _format_pydantic(exc, {"nodes": [data]}, prefix=("nodes", 0))
        raise GraphValidationError(
            f"invalid graph {graph_id!r}: {message}",
            errors=[{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()],
        ) from None


# -- validation ------------------------------------------------------------------------------


TARGETING = (RouterNode, ApprovalNode)
"""The node kinds that name other nodes in their fields (:func:`_targets`): every other
kind's successors are its edges."""


def _targets(node: Any) -> list[tuple[str, str]]:
    """(field, target) pairs a node refers to (none unless it is one of :data:`TARGETING`)."""
    if isinstance(node, RouterNode):
        refs = [(f"rules[{i}].to", r.to) for i, r in enumerate(node.rules)]
        if node.default:
            refs.append(("default", node.default))
        refs += [(f"choices.{k}", v) for k, v in (node.choices or {}).items()]
        return refs
    if isinstance(node, ApprovalNode):
        return [("on_reject", node.on_reject)]
    return []


def _agent_refs(node: Any) -> list[tuple[str, AgentRef]]:
    refs: list[tuple[str, AgentRef]] = []
    if isinstance(node, (AgentNode, RouterNode)) and node.agent is not None:
        refs.append(("agent", node.agent))
    if isinstance(node, AgentNode) and node.roles:
        refs += [(f"roles.{name}.agent", role.agent) for name, role in node.roles.items()]
    return refs


def _check_node(graph: GraphSpec, node: Any, ids: AbstractSet[str]) -> None:
    kind = type(node)
    if kind is ToolNode:
        return  # no targets, agents, prompt or keys outside reads: nothing here can fail
    if (kind is AgentNode and node.roles is None and type(node.agent) is AgentSpec
            and len(node.writes) == 1 and node.agent.tools is None and node.history is None
            and node.agent.tool_choice is None):
        # one inline agent (a fan-out's workers, a chain's steps): no targets, no agent to
        # resolve, no slice uses, the agent node's rules hold: only the prompt can fail
        _check_prompt(node)
        return
    where = f"node {node.id!r}"
    for field, target in _targets(node):
        if target != END and target not in ids:
            raise UnknownNodeReference(
                f"{where}, field '{field}': unknown node {target!r} "
                f"(expected one of: {', '.join(sorted(ids | {END}))})",
                node=node.id, field=field,
            )
    for field, ref in _agent_refs(node):
        if isinstance(ref, str) and ref not in graph.agents:
            raise GraphValidationError(
                f"{where}, field '{field}': unknown agent {ref!r}; define it under 'agents' "
                f"(known: {', '.join(sorted(graph.agents)) or 'none'}) or inline it",
                node=node.id, field=field,
            )
    for field, ref in _agent_refs(node):
        if isinstance(ref, AgentSpec):
            _check_agent_tools(graph, ref, where, f"{field}.")
    if isinstance(node, AgentNode):
        _check_agent_node(node, where)
    if isinstance(node, RouterNode) and not (node.rules or node.default or node.agent):
        raise GraphValidationError(
            f"{where}: a router needs 'rules' (with an optional 'default') or an 'agent'",
            node=node.id, field="rules",
        )
    if isinstance(node, RouterNode) and node.agent is not None and not node.choices:
        raise GraphValidationError(
            f"{where}, field 'choices': an agent router maps each answer to a node",
            node=node.id, field="choices",
        )
    _check_slice(node, where)
    _check_prompt(node)


def _check_prompt(node: Any) -> None:
    """Every ``{key}`` placeholder of the node's prompt is a key it reads."""
    prompt = getattr(node, "prompt", "")
    if "{" not in prompt:
        return
    placeholders = _PLACEHOLDER.findall(prompt)
    reads = set(node.reads) if len(placeholders) > 4 else node.reads  # a join's: not N²
    for key in placeholders:
        if key not in reads:
            raise GraphValidationError(
                f"node {node.id!r}, field 'prompt': placeholder {{{key}}} is not in 'reads' "
                f"({', '.join(node.reads) or 'empty'}); add it to reads",
                node=node.id, field="prompt",
            )


def _slice_uses(node: Any) -> list[tuple[str, str]]:
    """(field, key) pairs of memory keys a node's config reads outside its prompt."""
    if isinstance(node, RouterNode):
        return [(f"rules[{i}].when[{j}].key", c.key) for i, rule in enumerate(node.rules)
                for j, c in enumerate(rule.when) if c.key != ITERATION_KEY]
    if isinstance(node, SubgraphNode):
        return [(f"input.{child}", key) for child, key in node.input.items()]
    return []


def _check_slice(node: Any, where: str) -> None:
    """A node sees only its read slice: rules and input mappings use declared reads only."""
    for field, key in _slice_uses(node):
        if key not in node.reads:
            raise GraphValidationError(
                f"{where}, field '{field}': key {key!r} is not in 'reads' "
                f"({', '.join(node.reads) or 'empty'}); a node sees only the keys it reads — "
                "add it to reads",
                node=node.id, field=field, key=key,
            )


def _check_agent_tools(graph: GraphSpec, agent: AgentSpec, where: str, prefix: str) -> None:
    """An agent offers only tools the graph registers, and forces only one it offers."""
    known = graph.tools or {}
    for name in agent.tools or ():
        if name not in known:
            raise GraphValidationError(
                f"{where}, field '{prefix}tools': unknown tool {name!r}; register it under the graph's "
                f"'tools' (known: {', '.join(sorted(known)) or 'none'})", field="tools",
                tool=name)
    choice = agent.tool_choice
    if isinstance(choice, ToolChoiceName) and choice.name not in (agent.tools or ()):
        raise GraphValidationError(
            f"{where}, field '{prefix}tool_choice': forces tool {choice.name!r}, which the agent is not "
            f"offered (tools: {', '.join(agent.tools or ()) or 'none'})", field="tool_choice")
    if agent.tool_choice in ("auto", "required") and not agent.tools:
        raise GraphValidationError(
            f"{where}, field '{prefix}tool_choice': {agent.tool_choice!r} needs tools to choose from; list "
            "them under the agent's 'tools'", field="tool_choice")


def output_key(node: AgentNode) -> str:
    """The key a single-agent node writes its answer to (its one write besides history)."""
    return next(key for key in node.writes if key != node.history)


def _check_agent_node(node: AgentNode, where: str) -> None:
    if (node.agent is None) == (node.roles is None):
        raise GraphValidationError(
            f"{where}: an agent node takes exactly one of 'agent' or 'roles'",
            node=node.id, field="agent",
        )
    if node.history is not None and (node.roles is not None or node.history not in node.reads
                                     or node.history not in node.writes):
        raise GraphValidationError(
            f"{where}, field 'history': {node.history!r} must be listed in both 'reads' and "
            "'writes' of a single-agent node (the conversation is read from it and written "
            "back to it)", node=node.id, field="history")
    if node.roles is None:
        answers = [key for key in node.writes if key != node.history]
        if len(answers) != 1:
            raise GraphValidationError(
                f"{where}, field 'writes': a single-agent node writes exactly one key "
                f"besides its history (found {len(answers)})",
                node=node.id, field="writes",
            )
        return
    if sorted(node.role_order or []) != sorted(node.roles):
        raise GraphValidationError(
            f"{where}, field 'role_order': must list each role once "
            f"({', '.join(node.roles)}); got {node.role_order}",
            node=node.id, field="role_order",
        )
    for name, role in node.roles.items():
        bad = [i for i in role.instances if not 0 <= i < role.count]
        if bad:
            raise GraphValidationError(
                f"{where}, field 'roles.{name}.instances': index {bad[0]} is out of range "
                f"(the role has {role.count} instance(s): 0..{role.count - 1})",
                node=node.id, field=f"roles.{name}.instances",
            )
        if role.writes is not None and role.writes not in node.writes:
            raise GraphValidationError(
                f"{where}, field 'roles.{name}.writes': key {role.writes!r} is not in the "
                f"node's 'writes' ({', '.join(node.writes) or 'empty'})",
                node=node.id, field=f"roles.{name}.writes",
            )


def has_cycle(graph: GraphSpec, extra_edges: tuple[tuple[str, str], ...] = ()) -> bool:
    """Whether the graph's edges and router targets (plus ``extra_edges``) form a cycle.

    Iterative depth-first search (a 10,000-node chain must not hit the recursion limit),
    linear in nodes + edges."""
    edges = graph.index.successors  # built once per graph version, edges in order
    adjacency: dict[str, Sequence[str]] = {n.id: edges.get(n.id, ()) for n in graph.nodes}
    for node in graph.nodes:
        if isinstance(node, TARGETING):
            adjacency[node.id] = [*adjacency[node.id],
                                  *(t for _, t in _targets(node) if t != END)]
    for source, target in extra_edges:
        if target != END:
            adjacency[source] = [*adjacency[source], target]
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in adjacency:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(adjacency[root]))]
        while stack:
            node_id, successors = stack[-1]
            nxt = next(successors, None)
            if nxt is None:
                state[node_id] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return True
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(adjacency[nxt])))
    return False


def check_references(graph: GraphSpec) -> None:
    """Validate cross-references and loop bounds; raises a GraphValidationError subclass."""
    ids = set(graph.node_ids())
    if graph.start not in ids:
        raise UnknownNodeReference(
            f"field 'start': unknown node {graph.start!r} (nodes: {', '.join(sorted(ids))})",
            field="start",
        )
    for i, edge in enumerate(graph.edges):
        for field, ref in (("from", edge.source), ("to", edge.target)):
            if ref not in ids:
                raise UnknownNodeReference(
                    f"edges[{i}], field '{field}': unknown node {ref!r} "
                    f"(nodes: {', '.join(sorted(ids))})",
                    field=f"edges[{i}].{field}",
                )
    for name, agent in graph.agents.items():
        _check_agent_tools(graph, agent, f"agent {name!r}", "")
    for node in graph.nodes:
        _check_node(graph, node, ids)
    if graph.max_iterations is None and has_cycle(graph):
        raise UnboundedCycleError(
            f"graph {graph.id!r} contains a cycle but sets no 'max_iterations'; "
            "loops must be bounded: add max_iterations (e.g. 3)",
            field="max_iterations",
        )


# -- loading ---------------------------------------------------------------------------------


def _format_pydantic(exc: ValidationError, data: Any, prefix: tuple[Any, ...] = ()) -> str:
    lines = []
    for err in exc.errors()[:5]:
        loc = [*prefix, *err["loc"]]
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc.append("kind")  # pydantic locates a bad discriminator at the node itself
        where = ""
        if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
            try:
                where = f"node {data['nodes'][loc[1]]['id']!r}, "
            except (KeyError, IndexError, TypeError):
                where = f"nodes[{loc[1]}], "
            loc = loc[2:]
            if loc and loc[0] in NODE_KINDS:  # discriminator tag pydantic puts in the path
                loc = loc[1:]
        field = ".".join(str(p) for p in loc) or "(root)"
        lines.append(f"{where}field '{field}': {err['msg']}")
    return "; ".join(lines)


def parse_graph(data: Any) -> GraphSpec:
    """Validate a graph from plain data (a dict parsed from JSON or YAML)."""
    if not isinstance(data, dict):
        raise GraphValidationError(
            f"a graph must be a mapping with 'id', 'start' and 'nodes'; got {type(data).__name__}"
        )
    try:
        with collector_paused():  # a bounded pass building long-lived objects: see there
            return GraphSpec.model_validate(data)
    except ValidationError as exc:
        raise GraphValidationError(
            f"invalid graph {data.get('id', '?')!r}: {_format_pydantic(exc, data)}",
            errors=[{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()],
        ) from None


_PARSED_MAX = 32
_parsed: dict[str, GraphSpec] = {}  # canonical text -> graph, oldest first
_parsed_lock = threading.Lock()


def parse_stored_graph(data: str | dict[str, Any]) -> GraphSpec:
    """:func:`parse_graph` for a graph's stored form (JSON text, or the dict of
    :meth:`GraphSpec.to_wire`), cached by content: a stored version is parsed, validated,
    indexed and hashed once per process, however often runs and forks load it.

    Sound because a graph spec is immutable and its validation a pure function of its
    content. Only JSON-shaped data (string keys) may come here — the key is its JSON text.
    Keeps the newest :data:`_PARSED_MAX` graphs.
    """
    if isinstance(data, str):
        return parse_stored_text(data)[0]
    return _parse_cached(json.dumps(data, sort_keys=True), data)[0]


def parse_stored_text(text: str) -> tuple[GraphSpec, dict[str, Any] | None]:
    """:func:`parse_stored_graph` of JSON text, and the wire dict it decoded the text to
    when the graph was not cached (None on a hit): a store that also diffs graphs against
    this version (``SqliteStore``'s fork graph deltas) keeps it instead of decoding the
    text a second time. Validation never edits it; whoever keeps it must not either."""
    return _parse_cached(text, None)


def _parse_cached(text: str, data: dict[str, Any] | None,
                  ) -> tuple[GraphSpec, dict[str, Any] | None]:
    with _parsed_lock:
        hit = _parsed.get(text)
    if hit is not None:
        return hit, None
    decoded: dict[str, Any] = loads(text) if data is None else data
    graph = parse_graph(decoded)
    graph.__dict__["_read_from"] = (decoded, {})  # never edited: see parse_stored_text
    with _parsed_lock:
        _parsed[text] = graph
        while len(_parsed) > _PARSED_MAX:
            del _parsed[next(iter(_parsed))]
    return graph, decoded


def loads_graph(text: str, *, fmt: Literal["json", "yaml"] = "yaml") -> GraphSpec:
    """Parse graph text; YAML is a superset of JSON, so ``yaml`` reads both."""
    import yaml  # on first use: a run never parses YAML, and every imported module is heap
    # that each full garbage collection of the process walks

    try:
        data = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise GraphValidationError(f"graph text is not valid {fmt.upper()}: {exc}") from None
    return parse_graph(data)


def load_graph(path: str | Path) -> GraphSpec:
    """Load a graph from a ``.json``, ``.yaml`` or ``.yml`` file."""
    path = Path(path)
    if path.suffix not in (".json", ".yaml", ".yml"):
        raise GraphValidationError(
            f"{path.name}: expected a .json, .yaml or .yml graph file", path=str(path)
        )
    try:
        text = path.read_text()
    except OSError as exc:
        raise GraphValidationError(f"cannot read graph file {path}: {exc.strerror}") from None
    return loads_graph(text, fmt="json" if path.suffix == ".json" else "yaml")


def graph_json_schema() -> dict[str, Any]:
    """The JSON Schema of a graph file (what ``docs/graph-format.md`` documents)."""
    return GraphSpec.model_json_schema(by_alias=True)
