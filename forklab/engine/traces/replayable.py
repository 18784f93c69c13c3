"""Whether each call of an imported run is replayable, for every surface that shows a call
(SPEC §8: "shown as such on every surface with what is missing and how to turn capture on").

The truth is the ``trace.imported`` event's per-call import info (written by
:mod:`forklab.engine.traces.turns`); this module reads it back by call key. Pure.

A call's status is ``{"replayable": true}`` or ``{"replayable": false, "missing": [...],
"capture_hint": "..."}`` — the JSON every surface adds to the call (the Run JSON's
``imported.calls``, the conversation's turns and tool calls) — and its badge text is
``replayable`` or ``inspect-only — missing: …; turn on: …`` (the step drawer).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.traces import genai, openinference

# how to turn capture on, by the dialect that read the span (import info written before
# tool calls carried a hint names none: the GenAI one, the receiver's first dialect)
HINTS = {"genai": genai.CAPTURE_HINT, "openinference": openinference.CAPTURE_HINT}


def status(info: dict[str, Any]) -> dict[str, Any]:
    """The call's status as every surface shows it (see the module docstring)."""
    if info.get("replayable"):
        return {"replayable": True}
    hint = info.get("capture_hint") or HINTS.get(str(info.get("dialect")), genai.CAPTURE_HINT)
    return {"replayable": False, "missing": list(info.get("missing") or []),
            "capture_hint": hint}


def badge(call: dict[str, Any]) -> str:
    """``replayable``, or ``inspect-only — missing: …; turn on: …`` for a status."""
    if call.get("replayable"):
        return "replayable"
    missing = ", ".join(call.get("missing") or ()) or "content"
    return f"inspect-only — missing: {missing}; turn on: {call.get('capture_hint', '')}"


@dataclass(frozen=True)
class ImportedCalls:
    """An imported run's calls by full call key (``writer#1/turn:1``); a tool span no turn
    asked for has no key and is found by its node execution and its order in it."""

    by_key: dict[str, dict[str, Any]] = field(default_factory=dict)
    unkeyed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "node#1"

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> ImportedCalls:
        """From a ``trace.imported`` payload (its ``calls``)."""
        by_key: dict[str, dict[str, Any]] = {}
        unkeyed: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for info in payload.get("calls") or ():
            if info.get("call"):
                by_key[str(info["call"])] = status(info)
            elif info.get("node"):
                unkeyed[str(info["node"])].append(status(info))
        return cls(by_key, dict(unkeyed))

    def of(self, key: str | None, *, execution: str = "", index: int = 0
           ) -> dict[str, Any] | None:
        """The status of the call ``key`` (a full call key), else of the ``index``-th
        unkeyed tool call of ``execution`` (``node#occurrence``); None when unknown."""
        if key:
            return self.by_key.get(key)
        found = self.unkeyed.get(execution) or []
        return found[index] if index < len(found) else None


def calls_json(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Every call of a ``trace.imported`` payload with its status, as the Run JSON lists
    them: ``{call, kind, tool?, span_id, replayable, missing?, capture_hint?}``."""
    out = []
    for info in payload.get("calls") or ():
        entry: dict[str, Any] = {"call": info.get("call"), "kind": info.get("kind")}
        if info.get("tool"):
            entry["tool"] = info["tool"]
        if info.get("node") and not info.get("call"):
            entry["node"] = info["node"]
        entry["span_id"] = info.get("span_id")
        out.append({**entry, **status(info)})
    return out


__all__ = ["HINTS", "ImportedCalls", "badge", "calls_json", "status"]
