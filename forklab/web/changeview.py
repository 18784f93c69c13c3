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

from forklab.engine.graph import GraphSpec
from forklab.engine.state import Execution
from forklab.web.composer import agent_targets
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


def _agent(before: Before, target: str) -> Any:
    if before.graph is None:
        return None
    return next((t for t in agent_targets(before.graph) if t.target == target), None)


def _recorded(before: Before, node: str) -> Execution | None:
    return next((ex for ex in before.after_point if ex.node == node), None)


def _agent_change(change: dict[str, Any], before: Before) -> ChangeView:
    kind, target = change["kind"], change.get("target", "")
    agent = _agent(before, target)
    field_name = {"prompt": "system_prompt", "model": "model", "temperature": "temperature"}[kind]
    old = getattr(agent, field_name) if agent is not None else _MISSING
    view = ChangeView(kind=kind, title=f"{'system prompt' if kind == 'prompt' else kind} of "
                                       f"{target}")
    view.lines.append(_line(field_name.replace("_", " "), old, change.get(field_name)))
    if kind == "model" and change.get("provider"):
        view.lines.append(_line("provider", agent.provider if agent else _MISSING,
                                change["provider"]))
    return view


def _memory_change(change: dict[str, Any], before: Before) -> ChangeView:
    view = ChangeView(kind="memory", title="memory at the fork point")
    for key, value in (change.get("set") or {}).items():
        view.lines.append(_line(key, before.memory.get(key, _MISSING), value))
    for key in change.get("delete") or []:
        view.lines.append(_line(f"{key} (deleted)", before.memory.get(key, _MISSING),
                                _MISSING))
    return view


def _node_change(change: dict[str, Any], before: Before) -> ChangeView:
    kind, node = change["kind"], change.get("node", "")
    recorded = _recorded(before, node)
    if kind == "output":
        old = recorded.writes if recorded is not None else _MISSING
        return ChangeView(kind=kind, title=f"output of {node} (simulated, it does not run)",
                          lines=[_line("memory it writes", old, change.get("memory"))])
    if kind == "tool":
        results = [a["result"] for a in (recorded.actions if recorded else [])
                   if a["type"] == "tool_result"]
        old = results[-1] if results else _MISSING
        return ChangeView(kind=kind, title=f"tool result of {node} (simulated)",
                          lines=[_line("result", old, change.get("result"))])
    spec = before.graph.node(node) if before.graph is not None else None
    config = spec.model_dump(mode="json") if spec is not None else {}
    return ChangeView(kind=kind, title=f"config of {node}", lines=[
        _line(key, config.get(key, _MISSING), value)
        for key, value in (change.get("patch") or {}).items()])


def _other_change(change: dict[str, Any], before: Before) -> ChangeView:
    kind = change["kind"]
    if kind == "route":
        recorded = _recorded(before, change.get("from", ""))
        once = " (once)" if change.get("once") else ""
        return ChangeView(kind=kind, title=f"route of {change.get('from')}{once}", lines=[
            _line("next node", recorded.route if recorded and recorded.route else _MISSING,
                  change.get("to"))])
    if kind == "input_patch":
        patch = change.get("patch") or {}
        return ChangeView(kind=kind, title="run input (merge patch)", lines=[
            _line(key, before.input.get(key, _MISSING), _MISSING if value is None else value)
            for key, value in patch.items()])
    if kind == "human_response":
        gate = next((ex for ex in before.after_point if ex.kind == "approval"), None)
        decisions = [a["decision"] for a in (gate.actions if gate else [])
                     if a["type"] == "human"]
        view = ChangeView(kind=kind, title="answer at approval gates", lines=[
            _line("decision", decisions[-1] if decisions else _MISSING,
                  change.get("decision"))])
        if change.get("data") is not None:
            view.lines.append(_line("data", _MISSING, change["data"]))
        return view
    return ChangeView(kind=kind, title=kind, lines=[_line("change", _MISSING, change)])


def describe(changes: list[dict[str, Any]], before: Before) -> list[ChangeView]:
    """Each change of a fork as old → new."""
    views = []
    for change in changes:
        kind = change.get("kind")
        if kind in ("prompt", "model", "temperature"):
            views.append(_agent_change(change, before))
        elif kind == "memory":
            views.append(_memory_change(change, before))
        elif kind in ("output", "tool", "config"):
            views.append(_node_change(change, before))
        else:
            views.append(_other_change(change, before))
    return views


def input_changes(base_input: dict[str, Any], variant_input: dict[str, Any]) -> ChangeView:
    """Two unrelated runs: how their inputs differ (the first thing that can explain why)."""
    view = ChangeView(kind="input", title="run input")
    for key in sorted(set(base_input) | set(variant_input)):
        old, new = base_input.get(key, _MISSING), variant_input.get(key, _MISSING)
        if as_text(old if old is not _MISSING else None) != as_text(
                new if new is not _MISSING else None) or (old is _MISSING) != (new is _MISSING):
            view.lines.append(_line(key, old, new))
    return view
