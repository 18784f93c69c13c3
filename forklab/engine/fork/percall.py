"""Per-call changes and call-level fork points, as a fork's tail looks them up (SPEC §6.2-6.3).

:class:`CallChanges` indexes a fork's per-call changes by the call they address
(``(node, occurrence, call part)``): a ``reply`` or ``tool_result`` supplies that call
(label ``simulated``), ``rerun`` makes a call the fork would serve run live, and ``model`` /
``prompt`` / ``temperature`` with ``call`` and ``messages`` rewrite that one request. :class:`PrefixCalls` is
what a fork at a call-level point serves from the log: the calls its execution recorded
before the point.

Invariants: a change addresses a call by its key, never by a provider id (an alias
``NODE#N/tool:<id>`` is resolved against the base's log once, here); the later of two
changes to one call wins only across a lineage (one request's conflicts are refused earlier,
``fork.conflicts``); nothing here calls anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from forklab.engine.calls import CallAddress
from forklab.engine.fork.changes import (
    AgentChange,
    Change,
    HumanResponseChange,
    MessagesChange,
    ModelChange,
    PromptChange,
    ReplyChange,
    RerunChange,
    TemperatureChange,
    ToolResultChange,
)
from forklab.engine.fork.memo import Recording
from forklab.engine.fork.points import ForkPoint, recorded_calls
from forklab.engine.providers import ChatRequest

CallId = tuple[str, int, str]
"""(node, occurrence, call part): one call of a run."""


class _Applying(Protocol):
    def applies_to(self, node: str, occurrence: int) -> bool: ...


def last_applying[C: _Applying](changes: Sequence[C], node: str, occurrence: int) -> C | None:
    """The last of ``changes`` that applies to that execution (a lineage's later wins)."""
    for item in reversed(changes):
        if item.applies_to(node, occurrence):
            return item
    return None


def resolve_call(address: CallAddress, recording: Recording) -> CallId:
    """The call an address names; an alias by provider id is looked up in the base."""
    if address.tool_id is None:
        return address.node, address.occurrence, address.call
    ex = recording.by_occurrence.get((address.node, address.occurrence))
    part = next((p for p, call_id in (recorded_calls(ex) if ex else ())
                 if call_id == address.tool_id), f"tool:{address.tool_id}")
    return address.node, address.occurrence, part


@dataclass
class CallChanges:
    """A fork's per-call changes, by the call they address."""

    replies: dict[CallId, ReplyChange] = field(default_factory=dict)
    results: dict[CallId, ToolResultChange] = field(default_factory=dict)
    rerun: set[CallId] = field(default_factory=set)
    settings: dict[CallId, list[AgentChange | MessagesChange]] = field(default_factory=dict)
    answers: dict[CallId, HumanResponseChange] = field(default_factory=dict)

    @classmethod
    def of(cls, changes: Sequence[Change], recording: Recording) -> CallChanges:
        found = cls()
        for item in changes:
            address = item.call_address()
            if address is None:
                continue
            key = resolve_call(address, recording)
            match item:
                case ReplyChange():
                    found.replies[key] = item
                case ToolResultChange():
                    found.results[key] = item
                case RerunChange():
                    found.rerun.add(key)
                case ModelChange() | PromptChange() | TemperatureChange() | MessagesChange():
                    found.settings.setdefault(key, []).append(item)
                case HumanResponseChange():
                    found.answers[key] = item
        return found

    def touch(self, node: str, occurrence: int) -> bool:
        """Whether any change addresses a call of that execution (it must then execute)."""
        return any(k[:2] == (node, occurrence) for k in (
            *self.replies, *self.results, *self.rerun, *self.settings, *self.answers))

    def answer(self, node: str, occurrence: int, call: str) -> HumanResponseChange | None:
        return self.answers.get((node, occurrence, call))

    def within(self, node: str, occurrence: int, call: str) -> bool:
        """Whether a change addresses a call made inside call ``call`` (a tool's asks):
        the tool must then run, so the change can apply."""
        inside = call + "/"
        return any(k[:2] == (node, occurrence) and k[2].startswith(inside) for k in (
            *self.replies, *self.results, *self.rerun, *self.settings))

    def reply(self, node: str, occurrence: int, call: str) -> ReplyChange | None:
        return self.replies.get((node, occurrence, call))

    def result(self, node: str, occurrence: int, call: str) -> ToolResultChange | None:
        return self.results.get((node, occurrence, call))

    def reruns(self, node: str, occurrence: int, call: str) -> bool:
        return (node, occurrence, call) in self.rerun

    def adjusts(self, node: str, occurrence: int, call: str) -> bool:
        return (node, occurrence, call) in self.settings

    def adjust(self, node: str, occurrence: int, call: str,
               request: ChatRequest) -> ChatRequest:
        """``request`` with that call's model / prompt / temperature / messages changes
        applied (a temperature set is then sent: it leaves ``unsent``)."""
        for item in self.settings.get((node, occurrence, call), ()):
            match item:
                case ModelChange():
                    request = dataclasses.replace(
                        request, model=item.model, provider=item.provider or request.provider)
                case PromptChange():
                    request = dataclasses.replace(request, system_prompt=item.system_prompt)
                case TemperatureChange():
                    request = dataclasses.replace(
                        request, temperature=item.temperature,
                        unsent=request.unsent - {"temperature"})
                case MessagesChange():
                    request = dataclasses.replace(request, messages=item.request_messages())
        return request


@dataclass
class PrefixCalls:
    """The calls a fork at a call-level point serves from the log: every call the base's
    execution of that node recorded before the point's call, in recorded order."""

    node: str | None = None
    occurrence: int | None = None
    calls: frozenset[str] = frozenset()

    @classmethod
    def of(cls, point: ForkPoint | None, recording: Recording) -> PrefixCalls:
        if point is None or point.call is None or point.node is None:
            return cls()
        occurrence = point.occurrence or 1
        part = point.call.split("/", 1)[1]
        ex = recording.by_occurrence.get((point.node, occurrence))
        before: list[str] = []
        for recorded, _ in recorded_calls(ex) if ex else ():
            if recorded == part:
                break
            if not part.startswith(recorded + "/ask:"):  # the tool a point's ask is in runs
                before.append(recorded)
        return cls(node=point.node, occurrence=occurrence, calls=frozenset(before))

    def holds(self, node: str, occurrence: int, call: str) -> bool:
        return node == self.node and occurrence == self.occurrence and call in self.calls


__all__ = ["CallChanges", "CallId", "PrefixCalls", "last_applying", "resolve_call"]
