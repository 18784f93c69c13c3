"""What each node kind does when it executes (the runner's per-kind handlers).

Each handler gets a :class:`~forklab.engine.context.NodeContext` (what it may read and do,
never the runner), emits the node's action events through it and returns the routing
decision (``None`` means "follow the static edges"). Writes are emitted as
``memory.written`` events and buffered by the reducer until ``node.completed``.

Taint: a key a node writes is tainted when the node is an untrusted tool or any key in its
read slice is tainted.
"""

from __future__ import annotations

import json
from typing import Any

from forklab.engine.agent_loop import converse, uses_loop
from forklab.engine.answers import check_answer
from forklab.engine.asking import ask, chat_request, render
from forklab.engine.canonical import canonical_json, fingerprint
from forklab.engine.context import NodeContext, write_memory
from forklab.engine.errors import InvalidOverrides
from forklab.engine.events import (
    AgentResponded,
    CallFailed,
    HumanAnswered,
    HumanRequested,
    ReflectionDiscarded,
    RouteDecided,
    SubgraphCompleted,
    ToolCalled,
    ToolReturned,
)
from forklab.engine.graph import (
    END,
    AgentNode,
    ApprovalNode,
    RouterNode,
    SubgraphNode,
    ToolNode,
)
from forklab.engine.oracle import HumanAnswer, NodeFailure, Paused, RecordedTool, tool_writes
from forklab.engine.subgraphs import run_subgraph_node
from forklab.engine.tool_asks import ToolAsks
from forklab.engine.tools import ToolContext


def execute(ctx: NodeContext, node: Any) -> str | None:
    if isinstance(node, AgentNode):
        return _agent_node(ctx, node)
    if isinstance(node, ToolNode):
        return _tool_node(ctx, node)
    if isinstance(node, RouterNode):
        return _router_node(ctx, node)
    if isinstance(node, ApprovalNode):
        return _approval_node(ctx, node)
    if isinstance(node, SubgraphNode):
        return run_subgraph_node(ctx, node)
    raise AssertionError(f"unhandled node kind {node.kind}")


# -- agents ----------------------------------------------------------------------------------


def _output_value(node: AgentNode, text: str) -> Any:
    if node.output == "text":
        return text
    try:
        return json.loads(text)
    except ValueError:
        raise NodeFailure("invalid_json", f"node {node.id!r} expects JSON output; got "
                          f"{text[:120]!r}") from None


def _agent_node(ctx: NodeContext, node: AgentNode) -> str | None:
    graph = ctx.graph
    if node.agent is not None and uses_loop(node, agent := graph.resolve_agent(node.agent)):
        converse(ctx, node, agent)
        return None
    user = {"role": "user", "content": render(node.prompt, ctx.call.reads)}
    tainted = ctx.reads_tainted()
    if node.agent is not None:
        text = ask(ctx, graph.resolve_agent(node.agent), [user], choices=node.choices).text
        write_memory(ctx, node.writes[0], _output_value(node, text), tainted)
        return None
    transcript: list[str] = []
    for name, role in node.ordered_roles():
        messages = [user]
        if transcript:
            messages = [user, {"role": "user", "content": "Answers so far:\n" + "\n".join(transcript)}]
        answers = []
        for i in range(role.count):
            index = i if role.count > 1 else None
            agent = graph.resolve_agent(role.agent_for(i))
            text = ask(ctx, agent, messages, role=name, index=index, choices=role.choices).text
            answers.append(text)
            transcript.append(f"{name}{'' if index is None else f'[{i}]'}: {text}")
        if role.writes:
            write_memory(ctx, role.writes, answers if role.count > 1 else answers[0], tainted)
    return None


# -- tools -----------------------------------------------------------------------------------


def _tool_node(ctx: NodeContext, node: ToolNode) -> str | None:
    ctx.check_cancel()
    call = ctx.call
    args = {**node.params, **call.reads}
    ctx.emit(ToolCalled, tool=node.tool, effect=node.effect,
             args=ctx.env.redactor.redact(args), args_hash=fingerprint(args))
    asks = ToolAsks(ctx, None)
    tool_ctx = ToolContext(run_id=ctx.run_id, node=node.id, occurrence=call.occurrence,
                           reflections=ctx.env.reflections,
                           capture_reflections=ctx.oracle.captures_reflections, asker=asks)
    ctx.before_call()  # what the tool is called with is stored before it runs
    try:
        result, label = ctx.oracle.tool(call, node, args, tool_ctx)
    except NodeFailure as failure:  # the tool raised: the call is still recorded and counted
        asks.record()
        _discard_reflections(ctx, tool_ctx)
        ctx.emit(CallFailed, kind="tool", role=None, index=None, model=None,
                 label=failure.label, error=failure.error, request_hash=fingerprint(args))
        raise
    asks.record()  # the models it asked, in order, before its result
    _discard_reflections(ctx, tool_ctx)
    recorded = isinstance(result, RecordedTool)
    ctx.emit(ToolReturned, label=label, result=(
        result.result if recorded else ctx.env.redactor.redact(result)))
    writes = result.writes if recorded else tool_writes(node, result)
    tainted = ctx.reads_tainted(untrusted=not node.trusted)
    for key, value in sorted(writes.items()):  # key order: not stored
        write_memory(ctx, key, value, tainted)
    return None


def _discard_reflections(ctx: NodeContext, tool_ctx: ToolContext) -> None:
    for captured in tool_ctx.captured:
        ctx.emit(ReflectionDiscarded, **captured)


# -- routers ---------------------------------------------------------------------------------


def _router_node(ctx: NodeContext, node: RouterNode) -> str | None:
    from forklab.engine.planner import route_by_rules

    call = ctx.call
    forced = ctx.oracle.route(call, node)
    if forced is not None:
        target, reason, label = forced, "forced by a route change", "simulated"
    elif node.agent is not None:
        # sorted: a graph stored as JSON (jsonb, canonical JSON) keeps no key order, and the
        # order the answers are offered in is part of the request
        choices = sorted(node.choices or {})
        answer = ask(ctx, ctx.graph.resolve_agent(node.agent),
                     [{"role": "user", "content": render(node.prompt, call.reads)}],
                     choices=choices).text.strip()
        if answer not in (node.choices or {}):
            raise NodeFailure("unknown_route", f"router {node.id!r} got answer {answer!r}; "
                              f"expected one of {choices}")
        target, reason, label = (node.choices or {})[answer], f"agent answered {answer!r}", "live"
    else:
        target, reason = route_by_rules(node, call.reads, call.iteration)
        label = "live"
    ctx.emit(RouteDecided, to=target, reason=reason, label=label)
    for key in node.writes:
        write_memory(ctx, key, target, ctx.reads_tainted())
    return target


# -- approvals -------------------------------------------------------------------------------


def _approval_node(ctx: NodeContext, node: ApprovalNode) -> str | None:
    ctx.emit(HumanRequested, prompt=node.prompt, context=ctx.call.reads)
    ctx.before_call()  # a viewer (or a crash) sees the request before anyone answers it
    answer = ctx.oracle.human(ctx.call, node)
    if answer is None:
        raise Paused()
    if not answer.recorded:
        try:
            check_answer(node, answer.memory_updates)
        except InvalidOverrides as exc:  # an answer writing an undeclared key fails its
            # node, as a tool returning one does (a paused run's answer is refused instead,
            # before anything is recorded: Runner.answer)
            raise NodeFailure(exc.code, exc.message, label=answer.label) from None
    return finish_approval(ctx, node, answer)


def finish_approval(ctx: NodeContext, node: ApprovalNode, answer: HumanAnswer) -> str | None:
    """Record ``answer`` and apply it: the decision to the gate's first ``writes`` key, its
    memory updates to theirs (checked by the caller: :func:`~forklab.engine.answers.check_answer`
    for a new answer; one re-served from a log is applied as recorded)."""
    ctx.emit(HumanAnswered, decision=answer.decision, data=answer.data,
             memory_updates=dict(answer.memory_updates or {}),
             label=answer.label, answered_by=answer.answered_by)
    if node.writes:
        write_memory(ctx, node.writes[0], answer.decision, False)
    for key, value in sorted((answer.memory_updates or {}).items()):
        write_memory(ctx, key, value, False)
    return node.on_reject if answer.decision == "rejected" else None


# -- substitution (a fork's output change) ---------------------------------------------------


def substitute_output(ctx: NodeContext, node: Any, memory: dict[str, Any]) -> str | None:
    """Write a change-supplied output instead of executing the node (label ``simulated``)."""
    if isinstance(node, AgentNode):
        ctx.emit(AgentResponded, role=None, index=None, model="(simulated)",
                 text=canonical_json(memory), input_tokens=0, output_tokens=0,
                 cost_usd=0.0, latency_ms=0.0, label="simulated", request_hash="simulated")
    elif isinstance(node, SubgraphNode):
        ctx.emit(SubgraphCompleted, child_run_id="(simulated)", status="completed",
                 output=memory, label="simulated")
    else:
        ctx.emit(ToolReturned, result=memory, label="simulated")
    for key, value in sorted(memory.items()):
        write_memory(ctx, key, value, False)
    return None


__all__ = ["END", "Paused", "ask", "chat_request", "execute", "finish_approval", "render",
           "write_memory"]
