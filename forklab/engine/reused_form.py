"""``node.reused`` read as the events it stands for, for readers that show events.

A served node is one ``node.reused`` event in the log
(docs/forking.md#served-nodes-one-nodereused-event). Readers
that walk events one by one — the step drawer, the timeline's per-call details, the usage
projection — expand it here into the wire forms of the multi-event form it replaces:
``node.started``, one event per action record (``agent.responded``, ``tool.called``,
``tool.returned``, ``call.failed``, ``human.answered``, ``subgraph.completed``,
``route.decided``), ``memory.written`` per delete and write, and ``node.completed`` with
``memo: true``. Every expanded event keeps the ``node.reused`` event's seq and time: they are
views of one stored fact, never stored themselves. Pure.
"""

from __future__ import annotations

from typing import Any

REUSED = "node.reused"

_ACTION_EVENTS: dict[str, str] = {
    "agent_result": "agent.responded", "tool": "tool.called", "tool_result": "tool.returned",
    "call_failed": "call.failed", "human": "human.answered",
    "subgraph_result": "subgraph.completed", "route": "route.decided",
}


def _action_payload(action: dict[str, Any]) -> dict[str, Any]:
    payload = {k: v for k, v in action.items() if k not in ("type", "seq")}
    if action["type"] == "tool_result":
        payload["latency_ms"] = 0.0
    elif action["type"] == "tool":  # a graph's tools' effects are in the graph, not here;
        payload["effect"] = action.get("effect") or ""  # a workflow's tool recorded its own
    elif action["type"] == "human":
        payload["answered_by"] = ""
    return payload


def expand(wire: dict[str, Any]) -> list[dict[str, Any]]:
    """The wire events ``wire`` (a ``node.reused`` event) stands for; any other event is
    returned alone. Payload keys follow the expanded event types (SPEC §4.6)."""
    if wire.get("type") != REUSED:
        return [wire]
    p = wire.get("payload") or {}
    envelope: dict[str, Any] = {k: wire.get(k) for k in ("run_id", "seq", "node", "occurrence", "iteration",
                                         "at") if k in wire}

    def event(type_: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {**envelope, "type": type_, "v": 1, "payload": payload}

    events = [event("node.started", {"kind": p.get("kind", ""),
                                     "fingerprint": p.get("fingerprint", ""),
                                     "reads": p.get("reads") or {}})]
    for action in p.get("actions") or ():
        type_ = _ACTION_EVENTS.get(action.get("type", ""))
        if type_ is not None:
            events.append(event(type_, _action_payload(action)))
    tainted = set(p.get("tainted") or ())
    for key in p.get("deletes") or ():
        events.append(event("memory.written", {"key": key, "value": None, "tainted": False,
                                               "deleted": True}))
    for key, value in (p.get("writes") or {}).items():
        events.append(event("memory.written", {"key": key, "value": value,
                                               "tainted": key in tainted, "deleted": False}))
    events.append(event("node.completed", {"next": p.get("next") or [],
                                           "waiting": p.get("waiting") or [],
                                           "duration_ms": 0.0, "memo": True}))
    return events


def expand_all(wires: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`expand` over a list of wire events, in order."""
    if not any(w.get("type") == REUSED for w in wires):
        return wires
    return [e for w in wires for e in expand(w)]
