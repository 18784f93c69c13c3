"""The fork composer's form: fields fitted to the fork point's node, read back into changes.

A field is a change only when its value differs from what the run had (the prompt is
pre-filled with the current system prompt, the output with what the node wrote, …), so an
untouched form is a null fork. Changes the form has no field for travel in ``extra_changes``
(a JSON list), so every fork link round-trips. Errors come back keyed by form field.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from forklab.engine.canonical import canonical_json
from forklab.engine.errors import ForklabError
from forklab.engine.fork.changes import (
    AgentChange,
    Change,
    ConfigChange,
    HumanResponseChange,
    InputPatchChange,
    MemoryChange,
    OutputChange,
    RouteChange,
    ToolChange,
    parse_changes,
    wire,
)
from forklab.engine.fork.wire import DEFAULT_MAX_COST_USD, DEFAULT_MAX_LIVE_CALLS
from forklab.engine.graph import (
    AgentNode,
    ApprovalNode,
    GraphSpec,
    RouterNode,
    ToolNode,
)
from forklab.engine.state import RunState
from forklab.runs.models import Run
from forklab.web import timeline

HUMAN_DECISIONS = ("approved", "rejected", "edited")
SIDE_EFFECTS = ("replay", "block", "allow")


@dataclass(frozen=True)
class AgentTarget:
    """One agent a change can address: a node, ``node.role`` or ``node.role[i]``."""

    index: int
    target: str
    node: str
    provider: str
    model: str
    system_prompt: str
    temperature: float
    instance: bool = False  # one instance of a role that runs several
    models: tuple[str, ...] = ()  # what its provider serves (the model list it is offered)

    @property
    def prefix(self) -> str:
        return f"agent-{self.index}"

    @property
    def model_field(self) -> str:
        return f"{self.prefix}-model"

    @property
    def temperature_field(self) -> str:
        return f"{self.prefix}-temperature"

    @property
    def prompt_field(self) -> str:
        return f"{self.prefix}-prompt"


@dataclass(frozen=True)
class Recorded:
    """What the node after the point wrote and its tool calls returned, in the run."""

    writes: dict[str, Any]
    tool_results: list[Any]


@dataclass
class Composer:
    """Everything the composer shows for one run at one fork point."""

    run: Run
    graph: GraphSpec
    seq: int
    node: str | None  # the node that starts after the point (None at the end boundary)
    label: str
    state: RunState  # the state at the point
    recorded: Recorded | None  # what ``node`` did right after the point, when it completed
    targets: list[AgentTarget] = field(default_factory=list)
    models: list[str] = field(default_factory=list)

    @property
    def node_spec(self) -> Any:
        return self.graph.node(self.node) if self.node else None

    @property
    def kind(self) -> str | None:
        return getattr(self.node_spec, "kind", None)

    @property
    def point_targets(self) -> list[AgentTarget]:
        return [t for t in self.targets if t.node == self.node and not t.instance]

    @property
    def point_instances(self) -> list[AgentTarget]:
        return [t for t in self.targets if t.node == self.node and t.instance]

    @property
    def other_targets(self) -> list[AgentTarget]:
        return [t for t in self.targets if t.node != self.node]

    @property
    def routers(self) -> list[tuple[str, list[str]]]:
        """Every router with the targets it can choose (``end`` included when it may end)."""
        out = []
        for node in self.graph.nodes:
            if isinstance(node, RouterNode):
                choices = [r.to for r in node.rules] + ([node.default] if node.default else [])
                choices += list((node.choices or {}).values()) + self.graph.successors(node.id)
                out.append((node.id, list(dict.fromkeys(choices))))
        return out

    @property
    def has_approval(self) -> bool:
        return any(isinstance(n, ApprovalNode) for n in self.graph.nodes)

    @property
    def recorded_output(self) -> str:
        if self.recorded is None or not isinstance(self.node_spec, (AgentNode, ToolNode,
                                                                    ApprovalNode)):
            return ""
        return pretty(self.recorded.writes)

    @property
    def recorded_tool_result(self) -> str:
        if self.recorded is None or not isinstance(self.node_spec, ToolNode):
            return ""
        results = self.recorded.tool_results
        return pretty(results[-1]) if results else ""

    def folded_errors(self, errors: dict[str, str]) -> dict[str, bool]:
        """Which folded sections (single instances, other nodes' agents) hold a field with
        an error: the form opens them, else the error sits out of sight."""
        def any_in(targets: list[AgentTarget]) -> bool:
            return any(errors.get(name) for t in targets
                       for name in (t.model_field, t.temperature_field, t.prompt_field))

        return {"instance_errors": any_in(self.point_instances),
                "other_errors": any_in(self.other_targets)}

    def field_names(self) -> list[str]:
        """Every field with an error slot in the form (refreshed on each preflight)."""
        names = ["form", "at", "memory_set", "memory_delete", "input_patch", "extra_changes",
                 "side_effects", "max_live_calls", "max_cost_usd", "label"]
        if self.node_spec is not None and self.kind != "router":
            names.append("output_memory")
        if self.node:
            names.append("config_patch")
        if self.kind == "tool":
            names.append("tool_result")
        if self.routers:
            names.append("route")
        if self.has_approval:
            names += ["human_decision", "human_data", "human_memory_updates"]
        for t in self.targets:
            names += [t.model_field, t.temperature_field, t.prompt_field]
        return names

    def initial(self, changes: list[Change] | None = None) -> dict[str, Any]:
        """Form values: the run as it was, overlaid with ``changes`` (from a fork link)."""
        values: dict[str, Any] = {
            "memory_set": "", "memory_delete": "", "output_memory": self.recorded_output,
            "tool_result": self.recorded_tool_result, "route": "", "route_once": False, "human_decision": "", "human_data": "",
            "human_memory_updates": "", "input_patch": "",
            "config_patch": "", "side_effects": "replay", "allow_nodes": "", "memoize": False,
            "max_live_calls": DEFAULT_MAX_LIVE_CALLS, "max_cost_usd": f"{DEFAULT_MAX_COST_USD:.2f}",
            "ignore_budget": False, "label": "",
            "client_request_id": uuid.uuid4().hex,
        }
        for t in self.targets:
            values[f"{t.prefix}-model"] = t.model
            values[f"{t.prefix}-prompt"] = t.system_prompt
            values[f"{t.prefix}-temperature"] = t.temperature
        extra = [c.wire() for c in changes or [] if not self._prefill(values, c)]
        values["extra_changes"] = pretty(extra) if extra else ""
        return values

    def _prefill(self, values: dict[str, Any], change: Change) -> bool:
        """Show ``change`` in the field made for it; False: it goes to the free-form list
        (every kind without a field of its own, so a new kind needs nothing here)."""
        match change:
            case AgentChange():
                target = next((t for t in self.targets if t.target == change.target), None)
                name = f"{target.prefix}-{change.kind}" if target is not None else ""
                if name not in values:  # no field for this agent or this setting
                    return False
                values[name] = getattr(change, change.agent_field)
            case MemoryChange() if not values["memory_set"] and not values["memory_delete"]:
                values["memory_set"] = pretty(change.set) if change.set else ""
                values["memory_delete"] = ", ".join(change.delete)
            case OutputChange() if change.node == self.node:
                values["output_memory"] = pretty(change.memory)
            case ToolChange() if change.node == self.node:
                values["tool_result"] = pretty(change.result)
            case ConfigChange() if change.node == self.node:
                values["config_patch"] = pretty(change.patch)
            case RouteChange() if not values["route"]:
                values.update(route=f"{change.source}|{change.to}", route_once=change.once)
            case HumanResponseChange() if not values["human_decision"]:
                values["human_decision"] = change.decision
                values["human_data"] = pretty(change.data) if change.data is not None else ""
                values["human_memory_updates"] = (pretty(change.memory_updates)
                                                  if change.memory_updates else "")
            case InputPatchChange() if not values["input_patch"]:
                values["input_patch"] = pretty(change.patch)
            case _:
                return False
        return True


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def agent_targets(graph: GraphSpec) -> list[AgentTarget]:
    """Every agent a change can address, in graph order: a node's agent, each role, and each
    instance of a role that runs several (``vote.voters`` and ``vote.voters[2]``)."""
    found: list[tuple[str, str, Any, bool]] = []
    for node in graph.nodes:
        if isinstance(node, AgentNode) and node.roles:
            for name, role in node.ordered_roles():
                found.append((f"{node.id}.{name}", node.id, role.agent, False))
                if role.count > 1:
                    found += [(f"{node.id}.{name}[{i}]", node.id, role.agent_for(i), True)
                              for i in range(role.count)]
        elif isinstance(node, (AgentNode, RouterNode)) and node.agent is not None:
            found.append((node.id, node.id, node.agent, False))
    out = []
    for index, (target, node_id, ref, instance) in enumerate(found):
        agent = graph.resolve_agent(ref)
        out.append(AgentTarget(index=index, target=target, node=node_id,
                               provider=agent.provider, model=agent.model,
                               system_prompt=agent.system_prompt,
                               temperature=agent.temperature, instance=instance))
    return out


SCRIPTED_PREFIX = "scripted-"


def models_for(provider: str, known: list[str], current: str) -> tuple[str, ...]:
    """The models an agent on ``provider`` may switch to: the scripted provider serves the
    ``scripted-*`` models, a hosted (OpenAI-compatible) one every other model the price
    table knows; the agent's current model is always there."""
    scripted = provider == "scripted"
    served = [m for m in known if m.startswith(SCRIPTED_PREFIX) == scripted]
    return tuple(sorted(set(served) | {current}))


def with_models(targets: list[AgentTarget], known: list[str]) -> list[AgentTarget]:
    return [replace(t, models=models_for(t.provider, known, t.model)) for t in targets]


def same(a: Any, b: Any) -> bool:
    return canonical_json(a) == canonical_json(b)


def build_composer(run: Run, seq: int, *, graph: GraphSpec, after: Any,
                   models: list[str]) -> Composer:
    """The composer at boundary ``seq``; ``after`` is the timeline bar starting after it."""
    from forklab.runs import queries

    state = queries.state_at(run, seq)
    recorded = None
    if after is not None and after.end_seq and after.status == "completed":
        writes, results = queries.execution_outputs(run.id, after.start_seq, after.end_seq)
        recorded = Recorded(writes=writes, tool_results=results)
    node = after.node if after is not None else None
    targets = agent_targets(graph)
    known = sorted(set(models) | {t.model for t in targets})
    return Composer(run=run, graph=graph, seq=seq, node=node,
                    label=timeline.point_label(seq, after), state=state,
                    recorded=recorded, targets=with_models(targets, known), models=known)


def encode_changes(changes: list[Change]) -> str:
    """The ``changes`` parameter of a fork link: URL-safe base64 of their compact JSON."""
    import base64

    raw = json.dumps(wire(changes), separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_changes(text: str) -> list[Change]:
    """A fork link's changes; raises ValueError when they are not a JSON list of changes."""
    import base64
    import binascii

    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = json.loads(raw)
    except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the link's changes cannot be read: {exc}") from None
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise ValueError("the link's changes are not a list of change objects")
    try:
        return parse_changes(value)
    except ForklabError as exc:
        raise ValueError(f"the link's changes are not valid: {exc.message}") from None
