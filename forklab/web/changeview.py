"""What a fork changed, with the content: each change as old → new (the prompt word by word,
the model, the temperature, memory values, a node's output or tool result, a route, a config
or input patch, a gate's answer), for the top of the diff page.

"Old" is what the base had where the change applies: its graph's agent settings, the memory
and input the fork started from (its ``run.forked`` prefix), and what the base recorded for
the node after the fork point. Pure: every input is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.utils.safestring import SafeString

from forklab.engine.actions import HumanDecision, ToolResult
from forklab.engine.fork.apply import agent_at
from forklab.engine.fork.changes import (
    AgentChange,
    Change,
    ChangeBase,
    ConfigChange,
    HumanResponseChange,
    InputPatchChange,
    MemoryChange,
    ModelChange,
    OutputChange,
    RouteChange,
    ToolChange,
)
from forklab.engine.graph import AgentSpec, GraphSpec
from forklab.engine.state import Execution
from forklab.web.textdiff import as_text, sides

ABSENT = "(absent)"


@dataclass
class Line:
    """One thing a change sets: its name, the old and the new value (marked word by word)."""

    name: str
    old: SafeString
    new: SafeString
    same: bool = False


@dataclass
class ChangeView:
    kind: str
    title: str
    lines: list[Line] = field(default_factory=list)


@dataclass(frozen=True)
class Before:
    """What the base had at the fork point."""

    graph: GraphSpec | None
    memory: dict[str, Any]
    input: dict[str, Any]
    after_point: list[Execution]  # the base's executions after the fork point, in order


def _line(name: str, old: Any, new: Any) -> Line:
    old_text = ABSENT if old is _MISSING else as_text(old)
    new_text = ABSENT if new is _MISSING else as_text(new)
    left, right = sides(old_text, new_text)
    return Line(name=name, old=left, new=right, same=old_text == new_text)


_MISSING = object()


def _agent(before: Before, target: str) -> AgentSpec | None:
    return agent_at(before.graph, target) if before.graph is not None else None


def _recorded(before: Before, node: str) -> Execution | None:
    return next((ex for ex in before.after_point if ex.node == node), None)


def _agent_change(change: AgentChange, before: Before) -> ChangeView:
    agent = _agent(before, change.target)
    field_name = change.agent_field
    old = getattr(agent, field_name) if agent is not None else _MISSING
    what = "system prompt" if field_name == "system_prompt" else field_name.replace("_", " ")
    # a per-call change (SPEC §6.3) names its call, not the whole node it belongs to
    view = ChangeView(kind=change.kind, title=f"{what} of {change.call or change.target}")
    view.lines.append(_line(field_name.replace("_", " "), old, getattr(change, field_name)))
    if isinstance(change, ModelChange) and change.provider:
        view.lines.append(_line("provider", agent.provider if agent else _MISSING,
                                change.provider))
    return view


def _memory_change(change: MemoryChange, before: Before) -> ChangeView:
    view = ChangeView(kind="memory", title="memory at the fork point")
    for key, value in change.set.items():
        view.lines.append(_line(key, before.memory.get(key, _MISSING), value))
    for key in change.delete:
        view.lines.append(_line(f"{key} (deleted)", before.memory.get(key, _MISSING),
                                _MISSING))
    return view


def _output_change(change: OutputChange, before: Before) -> ChangeView:
    recorded = _recorded(before, change.node)
    old = recorded.writes if recorded is not None else _MISSING
    return ChangeView(kind=change.kind, title=f"output of {change.node} (simulated, it does "
                      "not run)", lines=[_line("memory it writes", old, change.memory)])


def _tool_change(change: ToolChange, before: Before) -> ChangeView:
    recorded = _recorded(before, change.node)
    results = [a.result for a in (recorded.actions if recorded else [])
               if isinstance(a, ToolResult)]
    old = results[-1] if results else _MISSING
    return ChangeView(kind=change.kind, title=f"tool result of {change.node} (simulated)",
                      lines=[_line("result", old, change.result)])


def _config_change(change: ConfigChange, before: Before) -> ChangeView:
    spec = before.graph.node(change.node) if before.graph is not None else None
    config = spec.model_dump(mode="json") if spec is not None else {}
    return ChangeView(kind=change.kind, title=f"config of {change.node}", lines=[
        _line(key, config.get(key, _MISSING), value) for key, value in change.patch.items()])


def _route_change(change: RouteChange, before: Before) -> ChangeView:
    recorded = _recorded(before, change.source)
    once = " (once)" if change.once else ""
    return ChangeView(kind=change.kind, title=f"route of {change.source}{once}", lines=[
        _line("next node", recorded.route if recorded and recorded.route else _MISSING,
              change.to)])


def _input_patch(change: InputPatchChange, before: Before) -> ChangeView:
    return ChangeView(kind=change.kind, title="run input (merge patch)", lines=[
        _line(key, before.input.get(key, _MISSING), _MISSING if value is None else value)
        for key, value in change.patch.items()])


def _human_response(change: HumanResponseChange, before: Before) -> ChangeView:
    gate = next((ex for ex in before.after_point if ex.kind == "approval"), None)
    decisions = [a.decision for a in (gate.actions if gate else [])
                 if isinstance(a, HumanDecision)]
    view = ChangeView(kind=change.kind, title="answer at approval gates", lines=[
        _line("decision", decisions[-1] if decisions else _MISSING, change.decision)])
    if change.data is not None:
        view.lines.append(_line("data", _MISSING, change.data))
    return view


def _any_change(change: ChangeBase, before: Before) -> ChangeView:
    """A kind with no old → new rendering of its own: its description and its fields."""
    fields = {k: v for k, v in change.wire().items() if k != "kind"}
    return ChangeView(kind=change.kind, title=change.describe(),
                      lines=[_line(key, _MISSING, value) for key, value in fields.items()])


def _view(change: Change, before: Before) -> ChangeView:
    match change:
        case AgentChange():
            return _agent_change(change, before)
        case MemoryChange():
            return _memory_change(change, before)
        case OutputChange():
            return _output_change(change, before)
        case ToolChange():
            return _tool_change(change, before)
        case ConfigChange():
            return _config_change(change, before)
        case RouteChange():
            return _route_change(change, before)
        case InputPatchChange():
            return _input_patch(change, before)
        case HumanResponseChange():
            return _human_response(change, before)
    return _any_change(change, before)


def describe(changes: list[Change], before: Before) -> list[ChangeView]:
    """Each change of a fork as old → new (a kind without its own view: its fields)."""
    return [_view(change, before) for change in changes]


def input_changes(base_input: dict[str, Any], variant_input: dict[str, Any]) -> ChangeView:
    """Two unrelated runs: how their inputs differ (the first thing that can explain why)."""
    view = ChangeView(kind="input", title="run input")
    for key in sorted(set(base_input) | set(variant_input)):
        old, new = base_input.get(key, _MISSING), variant_input.get(key, _MISSING)
        if as_text(old if old is not _MISSING else None) != as_text(
                new if new is not _MISSING else None) or (old is _MISSING) != (new is _MISSING):
            view.lines.append(_line(key, old, new))
    return view
