"""Serving a node its recorded execution (a memo hit in a fork tail).

The node's action records are copied into the new log labelled ``reused`` and its recorded
writes are applied, so a memo hit is indistinguishable from executing the node again —
same writes, same route, same taint, same failure — except that nothing is called.

Taint is recomputed the way the node kind computes it live (the reads of this execution,
an untrusted tool, a child run's tainted keys; an approval's writes are never tainted), so
memoization stays invisible to taint as well.
"""

from __future__ import annotations

from typing import Any

from forklab.engine.context import NodeContext, write_memory
from forklab.engine.events import (
    AgentResponded,
    CallFailed,
    HumanAnswered,
    MemoryWritten,
    RouteDecided,
    SubgraphCompleted,
    ToolCalled,
    ToolReturned,
)
from forklab.engine.graph import ApprovalNode, SubgraphNode, ToolNode
from forklab.engine.oracle import NodeFailure
from forklab.engine.state import Execution


def _emit_action(ctx: NodeContext, action: dict[str, Any]) -> None:
    kind = action["type"]
    if kind == "agent_result":
        ctx.emit(
            AgentResponded, role=action["role"], index=action["index"],
            model=action["model"], text=action["text"], input_tokens=action["input_tokens"],
            output_tokens=action["output_tokens"], cost_usd=action["cost_usd"], latency_ms=0.0,
            label="reused", request_hash=action["request_hash"])
    elif kind == "tool":  # what the tool was called with
        ctx.emit(ToolCalled, tool=action["tool"],
                              effect=getattr(ctx.graph.node(ctx.call.node), "effect", "read"),
                              args=action["args"], args_hash=action["args_hash"])
    elif kind == "tool_result":
        ctx.emit(ToolReturned, result=action["result"], label="reused")
    elif kind == "call_failed":
        ctx.emit(CallFailed, kind=action["kind"], role=action["role"],
                              index=action["index"], model=action["model"], label="reused",
                              error=action["error"], request_hash=action["request_hash"])
    elif kind == "human":
        ctx.emit(HumanAnswered, decision=action["decision"],
                              data=action["data"], memory_updates=action["memory_updates"],
                              label="reused")
    elif kind == "subgraph_result":
        ctx.emit(SubgraphCompleted, child_run_id=action["child_run_id"],
                              status=action["status"], output=action["output"], label="reused",
                              cost_usd=action["cost_usd"], input_tokens=action["input_tokens"],
                              output_tokens=action["output_tokens"],
                              tainted=list(action.get("tainted") or []))


def _write_taint(ctx: NodeContext, recorded: Execution) -> dict[str, bool]:
    """Whether each recorded write is tainted, as the node kind would decide it live."""
    return write_taint(ctx.graph.node(ctx.call.node), bool(ctx.tainted), recorded)


def write_taint(node: Any, reads_tainted: bool, recorded: Execution) -> dict[str, bool]:
    """Whether each recorded write of ``node`` is tainted, as the node kind would decide it
    live (``reads_tainted``: the execution reads a tainted key)."""
    if isinstance(node, ApprovalNode):
        return dict.fromkeys(recorded.writes, False)
    read_taint = reads_tainted or (isinstance(node, ToolNode) and not node.trusted)
    if isinstance(node, SubgraphNode):
        child = set()
        for action in recorded.actions:
            if action["type"] == "subgraph_result":
                child = set(action.get("tainted") or [])
        fed = {key: node.output.get(key) in child for key in recorded.writes}
        return {key: read_taint or fed[key] for key in recorded.writes}
    return dict.fromkeys(recorded.writes, read_taint)


def served_route(node: Any, recorded: Execution) -> str | None:
    """The route a served execution takes: the recorded one, or an approval's rejection."""
    if recorded.route is not None:
        return recorded.route
    decisions = [a["decision"] for a in recorded.actions if a["type"] == "human"]
    if isinstance(node, ApprovalNode) and decisions and decisions[-1] == "rejected":
        return node.on_reject
    return None


def reused_actions(recorded: Execution) -> list[dict[str, Any]]:
    """The action records serving ``recorded`` makes, without their ``seq``: exactly what
    :func:`replay_memo`'s events fold to (requests and child starts are not re-emitted, the
    route is ``memoized``, every call is labelled ``reused`` with no latency)."""
    actions: list[dict[str, Any]] = []
    for a in recorded.actions:
        kind = a["type"]
        if kind == "agent_result":
            actions.append({
                "type": kind, "request_hash": a["request_hash"], "text": a["text"],
                "role": a["role"], "index": a["index"], "model": a["model"],
                "input_tokens": a["input_tokens"], "output_tokens": a["output_tokens"],
                "cost_usd": a["cost_usd"], "latency_ms": 0.0, "label": "reused"})
        elif kind == "tool":
            actions.append({"type": kind, "args_hash": a["args_hash"], "args": a["args"],
                            "tool": a["tool"]})
        elif kind == "tool_result":
            actions.append({"type": kind, "result": a["result"], "label": "reused"})
        elif kind == "call_failed":
            actions.append({"type": kind, "kind": a["kind"], "role": a["role"],
                            "index": a["index"], "model": a["model"], "label": "reused",
                            "error": a["error"], "request_hash": a["request_hash"]})
        elif kind == "human":
            actions.append({"type": kind, "decision": a["decision"], "data": a["data"],
                            "memory_updates": a["memory_updates"], "label": "reused"})
        elif kind == "subgraph_result":
            actions.append({
                "type": kind, "child_run_id": a["child_run_id"], "status": a["status"],
                "output": a["output"], "label": "reused", "cost_usd": a["cost_usd"],
                "input_tokens": a["input_tokens"], "output_tokens": a["output_tokens"],
                "tainted": list(a.get("tainted") or [])})
    if recorded.route is not None:
        actions.append({"type": "route", "to": recorded.route, "reason": "memoized",
                        "label": "reused"})
    return actions


def reused_payload(node: Any, reads_tainted: bool, recorded: Execution) -> dict[str, Any]:
    """The ``node.reused`` payload fields that come from the recording (a completed
    execution): actions, writes, deletes and the written keys that are tainted."""
    taint = write_taint(node, reads_tainted, recorded)
    return {"actions": reused_actions(recorded), "writes": dict(recorded.writes),
            "deletes": list(recorded.deletes),
            "tainted": [key for key, tainted in taint.items() if tainted]}


def replay_memo(ctx: NodeContext, recorded: Execution) -> str | None:
    """Serve a node its recorded execution: copies of its action records, labelled reused.

    Returns the recorded route (or an approval's rejection target); raises NodeFailure when
    the recorded execution failed.
    """
    for action in recorded.actions:
        _emit_action(ctx, action)
    if recorded.status == "failed":
        error = recorded.error or {}
        raise NodeFailure(str(error.get("type", "failed")), str(error.get("message", "")))
    for key in recorded.deletes:
        ctx.emit(MemoryWritten, key=key, value=None, deleted=True)
    taint = _write_taint(ctx, recorded)
    for key, value in recorded.writes.items():
        write_memory(ctx, key, value, taint[key])
    if recorded.route is not None:
        ctx.emit(RouteDecided, to=recorded.route, reason="memoized",
                              label="reused")
    return served_route(ctx.graph.node(ctx.call.node), recorded)
