"""Serving a node its recorded execution (a memo hit in a fork tail).

The node's action records are copied into the new log labelled ``reused`` and its recorded
writes are applied, so a memo hit is indistinguishable from executing the node again —
same writes, same route, same taint, same failure — except that nothing is called.

Taint is recomputed the way the node kind computes it live (the reads of this execution,
an untrusted tool, a child run's tainted keys; an approval's writes are never tainted), so
memoization stays invisible to taint as well.
"""

from __future__ import annotations

from typing import Any, assert_never

from forklab.engine.actions import (
    Action,
    AgentAnswer,
    AgentAsked,
    CallFailure,
    ChildOutcome,
    ChildStarted,
    HumanDecision,
    RouteTaken,
    ToolCall,
    ToolResult,
    replaced,
    served_answer,
)
from forklab.engine.context import NodeContext, write_memory
from forklab.engine.events import (
    AgentResponded,
    CallFailed,
    HumanAnswered,
    MemoryWritten,
    NodeReused,
    RouteDecided,
    SubgraphCompleted,
    ToolCalled,
    ToolReturned,
    node_reused,
)
from forklab.engine.graph import ApprovalNode, SubgraphNode, ToolNode
from forklab.engine.oracle import NodeCall, NodeFailure
from forklab.engine.state import Execution


def _emit_action(ctx: NodeContext, record: Action) -> None:
    """Re-emit the event a served record stands for (requests, child starts and routes are
    not re-emitted: the route is decided once, by :func:`replay_memo`)."""
    match record:
        case AgentAnswer():
            ctx.emit(AgentResponded, role=record.role, index=record.index, model=record.model,
                     text=record.text, input_tokens=record.input_tokens,
                     output_tokens=record.output_tokens, cost_usd=record.cost_usd,
                     latency_ms=0.0, label="reused", request_hash=record.request_hash,
                     call=record.call,
                     tool_calls=None if record.tool_calls is None else [
                         dict(c) for c in record.tool_calls],
                     finish_reason=record.finish_reason)
        case ToolCall():  # what the tool was called with
            ctx.emit(ToolCalled, tool=record.tool, effect=_tool_effect(ctx, record),
                     args=record.args, args_hash=record.args_hash, call=record.call,
                     call_id=record.call_id)
        case ToolResult():
            ctx.emit(ToolReturned, result=record.result, label="reused", call=record.call)
        case CallFailure():
            ctx.emit(CallFailed, kind=record.kind, role=record.role, index=record.index,
                     model=record.model, label="reused", error=record.error,
                     request_hash=record.request_hash, call=record.call)
        case HumanDecision():
            ctx.emit(HumanAnswered, decision=record.decision, data=record.data,
                     memory_updates=record.memory_updates, label="reused")
        case ChildOutcome():
            ctx.emit(SubgraphCompleted, child_run_id=record.child_run_id,
                     status=record.status, output=record.output, label="reused",
                     cost_usd=record.cost_usd, input_tokens=record.input_tokens,
                     output_tokens=record.output_tokens, tainted=list(record.tainted))
        case AgentAsked() | ChildStarted() | RouteTaken():
            pass
        case _:
            assert_never(record)


def _tool_effect(ctx: NodeContext, record: ToolCall) -> str:
    """The effect a served tool call is recorded with: a tool the model chose has its
    registry entry's (graph ``tools:``); a tool node its node's."""
    spec = (ctx.graph.tools or {}).get(record.tool) if record.call is not None else None
    if spec is not None:
        return spec.effect
    return str(getattr(ctx.graph.node(ctx.call.node), "effect", "read"))


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
        child: set[str] = set()
        for record in recorded.actions:
            if isinstance(record, ChildOutcome):
                child = set(record.tainted)
        fed = {key: node.output.get(key) in child for key in recorded.writes}
        return {key: read_taint or fed[key] for key in recorded.writes}
    return dict.fromkeys(recorded.writes, read_taint)


def served_route(node: Any, recorded: Execution) -> str | None:
    """The route a served execution takes: the recorded one, or an approval's rejection."""
    if recorded.route is not None:
        return recorded.route
    decisions = [a.decision for a in recorded.actions if isinstance(a, HumanDecision)]
    if isinstance(node, ApprovalNode) and decisions and decisions[-1] == "rejected":
        return node.on_reject
    return None


def reused_actions(recorded: Execution, seq: int) -> tuple[Action, ...]:
    """The action records serving ``recorded`` makes, at ``seq``: exactly what
    :func:`replay_memo`'s events fold to, seq numbers aside (requests and child starts are
    not re-emitted, the route is ``memoized``, every call is labelled ``reused`` with no
    latency)."""
    served: list[Action] = []
    for a in recorded.actions:
        match a:  # every field copied but these (actions.replaced: no __init__ per record)
            case AgentAnswer():  # replaced(a, seq=seq, latency_ms=0.0, label="reused")
                served.append(served_answer(a, seq))
            case ToolCall():
                served.append(replaced(a, seq=seq))
            case ToolResult() | CallFailure() | HumanDecision() | ChildOutcome():
                served.append(replaced(a, seq=seq, label="reused"))
            case AgentAsked() | ChildStarted() | RouteTaken():
                pass
            case _:
                assert_never(a)
    if recorded.route is not None:
        served.append(RouteTaken(seq=seq, to=recorded.route, reason="memoized",
                                 label="reused"))
    return tuple(served)


def tainted_writes(node: Any, reads_tainted: bool, recorded: Execution) -> list[str]:
    """The written keys of serving ``recorded`` that are tainted (:func:`write_taint`'s,
    in write order): for a node that is no approval, tool or subgraph, every key when the
    execution reads a tainted key and none otherwise, without the per-key mapping."""
    if not isinstance(node, (ApprovalNode, ToolNode, SubgraphNode)):
        return list(recorded.writes) if reads_tainted else []
    return [key for key, tainted in write_taint(node, reads_tainted, recorded).items()
            if tainted]


def reused_event(run_id: str, seq: int, at: float, call: NodeCall, node: Any,
                 reads_tainted: bool, recorded: Execution, next: list[str],
                 waiting: list[str]) -> NodeReused:
    """The ``node.reused`` event serving ``call`` (of ``node``) its completed recording at
    ``seq``: the call's envelope, and from the recording its actions, writes, deletes and
    the written keys that are tainted (one per served node of a fork tail)."""
    return node_reused(
        run_id, seq, at, call.node, call.occurrence, call.iteration, kind=call.kind,
        fingerprint=call.fingerprint, reads=call.reads, actions=reused_actions(recorded, seq),
        writes=dict(recorded.writes), deletes=list(recorded.deletes),
        tainted=tainted_writes(node, reads_tainted, recorded), next=next, waiting=waiting)


def replay_memo(ctx: NodeContext, recorded: Execution) -> str | None:
    """Serve a node its recorded execution: copies of its action records, labelled reused.

    Returns the recorded route (or an approval's rejection target); raises NodeFailure when
    the recorded execution failed.
    """
    for record in recorded.actions:
        _emit_action(ctx, record)
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
