"""Call keys: every model turn and every tool call has a stable name (SPEC §6.2).

A key is ``NODE#OCCURRENCE/CALL`` where ``CALL`` names the call inside that node execution:
``turn:2`` (the second model turn), ``turn:2/tool:1`` (the first tool call the model asked
for in that turn), ``turn:1/tool:1/ask:1`` (a model asked from inside that tool; a tool
node's own asks are ``ask:1``, ``ask:2``…), and for a node with roles ``judge/turn:1`` or
``voters[2]/turn:1``. A ``workflow`` node (code-first, SPEC §7) names its calls by vendor
and by tool: ``openai:3`` (the third call through the official ``openai`` client),
``anthropic:1``, ``tool:refund#1`` (the first call of the ``@forklab.tool`` named
``refund``), each under the ``forklab.step`` groups it was made in (``triage/openai:1``).
Events and action records store the
``CALL`` part (``call``); the envelope holds node and occurrence.

Invariants:
- keys never depend on provider call ids, so a fork's calls line up with its base's;
- ``NODE#OCC/tool:<provider id>`` is accepted as an alias of the tool call that id names
  (:func:`parse_call_key` keeps it as ``tool_id``; the caller resolves it against the log);
- formatting and parsing round-trip: ``parse_call_key(str(k)) == k``.

This module is a leaf: it imports nothing from the engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_KEY = re.compile(
    r"^(?P<node>[A-Za-z_][A-Za-z0-9_\-]*)(?:#(?P<occurrence>\d+))?/(?P<call>.+)$")
_PART = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_\-]*(?:\[\d+\])?|turn:\d+|tool:\d+|ask:\d+"
                   r"|(?:openai|anthropic):\d+|tool:[A-Za-z_][A-Za-z0-9_\-]*#\d+)$")
_WORKFLOW_CALL = re.compile(r"^(?:(?:openai|anthropic):\d+|tool:[A-Za-z_][A-Za-z0-9_\-]*#\d+)$")
"""The last part of a workflow node's call: a vendor client call or a ``@forklab.tool`` call."""
_WORKFLOW_MODEL = re.compile(r"^(?:openai|anthropic):\d+$")
_WORKFLOW_TOOL = re.compile(r"^tool:[A-Za-z_][A-Za-z0-9_\-]*#\d+$")
_ALIAS = re.compile(r"^tool:(?P<id>[^/]+)$")


def call_key(node: str, occurrence: int, call: str | None) -> str | None:
    """The full key of ``call`` (a record's ``call`` field) in ``node``'s execution."""
    return None if call is None else f"{node}#{occurrence}/{call}"


def turn_call(turn: int, role: str | None = None, index: int | None = None) -> str:
    """``turn:N``, under ``role`` (``judge/turn:1``, ``voters[2]/turn:1``) when there is one."""
    if role is None:
        return f"turn:{turn}"
    return f"{role}{'' if index is None else f'[{index}]'}/turn:{turn}"


def tool_call(turn: str, n: int) -> str:
    """The ``n``-th (1-based) tool call the model asked for in ``turn``."""
    return f"{turn}/tool:{n}"


def workflow_call(steps: tuple[str, ...], part: str) -> str:
    """A workflow node's call ``part`` (``openai:3``, ``tool:refund#1``) under the
    ``forklab.step`` groups ``steps`` it was made in (``triage/openai:1``)."""
    return "/".join((*steps, part))


@dataclass(frozen=True, slots=True)
class CallAddress:
    """A parsed call key. ``tool_id`` is set for the alias form ``NODE#OCC/tool:<id>``
    (then ``call`` is empty until the caller resolves the id against a log)."""

    node: str
    occurrence: int
    call: str
    tool_id: str | None = None

    def __str__(self) -> str:
        return f"{self.node}#{self.occurrence}/{self.call or f'tool:{self.tool_id}'}"

    @property
    def turn(self) -> str:
        """The model turn this call belongs to (itself for a turn)."""
        parts = self.call.split("/")
        for i, part in enumerate(parts):
            if part.startswith("turn:"):
                return "/".join(parts[: i + 1])
        return self.call

    @property
    def is_turn(self) -> bool:
        """Whether this is a model call: a turn, or a workflow's vendor client call."""
        last = self.call.split("/")[-1]
        return last.startswith("turn:") or bool(_WORKFLOW_MODEL.match(last))


def parse_call_key(text: str) -> CallAddress | None:
    """``text`` as a call key, or None when it is not one (no ``/`` after the node, or a
    part that names no call). The occurrence defaults to 1 (``assist/turn:2``)."""
    found = _KEY.match(text.strip())
    if found is None:
        return None
    node, call = found["node"], found["call"]
    occurrence = int(found["occurrence"] or 1)
    alias = _ALIAS.match(call)
    if alias and not alias["id"].isdigit() and not _WORKFLOW_CALL.match(call):
        return CallAddress(node=node, occurrence=occurrence, call="", tool_id=alias["id"])
    parts = call.split("/")
    if not all(_PART.match(part) for part in parts):
        return None
    if not any(p.startswith(("turn:", "ask:")) for p in parts) and not _WORKFLOW_CALL.match(
            parts[-1]):
        return None
    return CallAddress(node=node, occurrence=occurrence, call=call)


def is_code_tool_call(call: str) -> bool:
    """Whether ``call`` (a record's ``call`` part) is a workflow's ``@forklab.tool`` call
    (``triage/tool:refund#1``): made by the code, not asked for under a model turn's key."""
    return bool(_WORKFLOW_TOOL.match(call.rpartition("/")[2]))


def looks_like_call_key(text: str) -> bool:
    """A CLI target with ``/`` or ``:`` is a call key, not a node or role (SPEC §6.3)."""
    return "/" in text or ":" in text


__all__ = ["CallAddress", "call_key", "is_code_tool_call", "looks_like_call_key", "parse_call_key", "tool_call",
           "turn_call", "workflow_call"]
