"""The run page's conversation thread (SPEC §6.5): an agent execution's turns as the step
drawer shows them, each turn and tool call with a fork marker (the composer at
``{"before_call": KEY}``) and the per-call actions — "edit reply", "replace result",
"rerun live" — as fork links whose changes prefill the composer.

A fork link's ``changes`` are the composer's usual encoding (URL-safe base64 of a JSON
list, read back by ``composer.decode_changes``); ``call`` names the call the fork starts
right before (the composer posts it as ``at={"before_call": KEY}``).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse

from forklab.engine.traces.replayable import badge
from forklab.runs.conversations import Thread, ToolUse, Turn
from forklab.runs.models import Run
from forklab.web.imported import workflow_links
from forklab.web.steps import Value, text_of


def encode(changes: list[dict[str, Any]]) -> str:
    """A fork link's ``changes``: URL-safe base64 of their compact JSON (as
    ``composer.encode_changes``, for change objects in wire form)."""
    raw = json.dumps(changes, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass
class Action:
    name: str  # edit_reply | replace_result | rerun | answer_gate
    text: str
    url: str
    changes: list[dict[str, Any]]

    @property
    def changes_json(self) -> str:
        return json.dumps(self.changes, sort_keys=True)


@dataclass
class CallView:
    """A turn or a tool call as shown: its key, fork marker and actions."""

    key: str
    fork_url: str = ""
    actions: list[Action] = field(default_factory=list)
    badge: str = ""  # an imported run's call: replayable / inspect-only — missing: …
    inspect_only: bool = False  # an imported call whose content was not captured


def _badge(call: Turn | ToolUse) -> str:
    if call.replayable is None:
        return ""
    return badge({"replayable": call.replayable, "missing": call.missing,
                  "capture_hint": call.capture_hint or ""})


@dataclass
class ToolView(CallView):
    use: ToolUse | None = None
    arguments: Value | None = None
    result: Value | None = None
    asks: list[TurnView] = field(default_factory=list)  # models the tool asked


@dataclass
class TurnView(CallView):
    turn: Turn | None = None
    earlier: list[Value] = field(default_factory=list)
    new: list[Value] = field(default_factory=list)
    reply: Value | None = None
    tools: list[ToolView] = field(default_factory=list)


@dataclass
class ThreadView:
    thread: Thread
    turns: list[TurnView]

    @property
    def input_tokens(self) -> int:
        return sum(t.turn.input_tokens for t in self.turns if t.turn)

    @property
    def output_tokens(self) -> int:
        return sum(t.turn.output_tokens for t in self.turns if t.turn)


def _value(name: str, value: Any) -> Value:
    text, is_json = text_of(value)
    return Value(name=name, text=text, json=is_json)


def _message(message: dict[str, Any]) -> Value:
    role = str(message.get("role") or "")
    name = role + (f" · {message['name']}" if message.get("name") else "")
    content: Any = message.get("content")
    if message.get("tool_calls"):
        content = {"content": content, "tool_calls": message["tool_calls"]}
    return _value(name, content if content is not None else "")


class Links:
    """The composer URLs of one execution: at its before-node point, before ``call``.

    A run imported from a trace forks before one call (SPEC §8): not mapped to code, its
    replayable turns are re-asked (rerun live, or changed in the composer), its tool calls
    and inspect-only turns are not forked; mapped (``workflow``: imported call key → the
    workflow's call key, for the calls a fork can start before), a marker forks before the
    workflow call the imported call became, re-executing the code."""

    def __init__(self, run: Run, point: int, *,
                 workflow: dict[str, str] | None = None) -> None:
        self.base = reverse("compose", args=[run.id])
        self.point = point
        self.imported = bool(run.trace_id)
        self.workflow = workflow
        self.one_call = self.imported and workflow is None

    def target(self, call: Turn | ToolUse) -> str | None:
        """The key a fork before ``call`` starts at; None when no fork can start there."""
        if self.workflow is not None:
            return self.workflow.get(call.key)
        if self.one_call and (isinstance(call, ToolUse) or call.replayable is False):
            return None
        return call.key

    def fork(self, key: str, changes: list[dict[str, Any]] | None = None) -> str:
        query: dict[str, Any] = {"call": key} if self.workflow is not None else {
            "at": self.point, "call": key}
        if changes:
            query["changes"] = encode(changes)
        return f"{self.base}?{urlencode(query)}"

    def action(self, name: str, text: str, changes: list[dict[str, Any]]) -> Action:
        return Action(name=name, text=text, url=self.fork(changes[0]["call"], changes),
                      changes=changes)


def _tool_view(use: ToolUse, links: Links | None) -> ToolView:
    view = ToolView(key=use.key, use=use, arguments=_value("arguments", use.arguments),
                    result=_value("error" if use.error else "result",
                                  use.error if use.error else use.result)
                    if use.done else None,
                    asks=[_turn_view(a, links) for a in use.asks], badge=_badge(use))
    target = links.target(use) if links is not None else None
    if links is not None and target is not None:
        view.fork_url = links.fork(target)
    if links is not None and not links.imported:
        view.actions = [
            links.action("replace_result", "replace result",
                         [{"kind": "tool_result", "call": use.key, "result": use.result}]),
            links.action("rerun", "rerun live", [{"kind": "rerun", "call": use.key}])]
        if use.approval is not None:  # a gated call: answer its gate the other way
            other = "rejected" if use.approval.get("decision") == "approved" else "approved"
            view.actions.append(links.action(
                "answer_gate", f"answer {other}",
                [{"kind": "human_response", "call": use.key, "decision": other}]))
    return view


def _turn_view(turn: Turn, links: Links | None) -> TurnView:
    view = TurnView(key=turn.key, turn=turn, earlier=[_message(m) for m in turn.earlier],
                    new=[_message(m) for m in turn.new],
                    reply=_value("reply", turn.text) if turn.text else None,
                    tools=[_tool_view(u, links) for u in turn.tools], badge=_badge(turn))
    target = links.target(turn) if links is not None else None
    if links is not None and target is not None:
        view.fork_url = links.fork(target)
        reply: dict[str, Any] = {"kind": "reply", "call": turn.key, "text": turn.text}
        if turn.tool_calls:
            reply["tool_calls"] = turn.tool_calls
        view.actions = [links.action("edit_reply", "edit reply", [reply]),
                        links.action("rerun", "rerun live", [{"kind": "rerun",
                                                              "call": turn.key}])]
        if links.imported:  # a re-ask, not a served reply; mapped: the marker alone
            view.actions = view.actions[1:] if links.one_call else []
    view.inspect_only = turn.replayable is False
    return view


def thread_view(thread: Thread, run: Run, *, point: int, forkable: bool) -> ThreadView:
    """``thread`` as the page shows it; fork markers and actions only when ``forkable``
    (``point``: the seq before the execution started, where the composer opens)."""
    links = None
    if forkable:
        links = Links(run, point, workflow=workflow_links(run) if run.trace_id else None)
    return ThreadView(thread=thread, turns=[_turn_view(t, links) for t in thread.turns])
