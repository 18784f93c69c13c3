"""What each node kind does when it executes (the runner's per-kind handlers).

Each handler emits the node's action events through the runner and returns the routing
decision (``None`` means "follow the static edges"). Writes are emitted as
``memory.written`` events and buffered by the reducer until ``node.completed``.

Taint: a key a node writes is tainted when the node is an untrusted tool or any key in its
read slice is tainted.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from forklab.engine.canonical import canonical_json, fingerprint
from forklab.engine.events import (
    AgentRequested,
    AgentResponded,
    CallFailed,
    HumanAnswered,
    HumanRequested,
    MemoryWritten,
    ReflectionDiscarded,
    RouteDecided,
    SubgraphCompleted,
    ToolCalled,
    ToolReturned,
)
from forklab.engine.graph import (
    END,
    AgentNode,
    AgentSpec,
    ApprovalNode,
    RouterNode,
    SubgraphNode,
    ToolNode,
)
from forklab.engine.oracle import HumanAnswer, NodeCall, NodeFailure, RecordedTool
from forklab.engine.providers import ChatRequest
from forklab.engine.tools import ToolContext

if TYPE_CHECKING:
    from forklab.engine.runner import Runner

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def render(template: str, reads: dict[str, Any]) -> str:
    """Fill ``{key}`` placeholders from the read slice (non-strings as canonical JSON)."""
    if not template:
        return canonical_json(reads)

    def value(match: re.Match[str]) -> str:
        v = reads.get(match.group(1), "")
        return v if isinstance(v, str) else canonical_json(v)

    return _PLACEHOLDER.sub(value, template)


def reads_tainted(runner: Runner, call: NodeCall, untrusted: bool = False) -> bool:
    return untrusted or any(key in runner.state.taint for key in call.reads)


def write_memory(runner: Runner, call: NodeCall, key: str, value: Any, tainted: bool) -> None:
    runner._envelope_emit(MemoryWritten, call, key=key, value=value, tainted=tainted)


def execute(runner: Runner, node: Any, call: NodeCall) -> str | None:
    if isinstance(node, AgentNode):
        return _agent_node(runner, node, call)
    if isinstance(node, ToolNode):
        return _tool_node(runner, node, call)
    if isinstance(node, RouterNode):
        return _router_node(runner, node, call)
    if isinstance(node, ApprovalNode):
        return _approval_node(runner, node, call)
    if isinstance(node, SubgraphNode):
        from forklab.engine.subgraphs import run_subgraph_node

        return run_subgraph_node(runner, node, call)
    raise AssertionError(f"unhandled node kind {node.kind}")


# -- agents ----------------------------------------------------------------------------------


def ask(runner: Runner, call: NodeCall, agent: AgentSpec, messages: list[dict[str, Any]],
        *, role: str | None = None, index: int | None = None,
        choices: list[str] | None = None) -> str:
    """One model call: ``agent.requested``, the oracle's answer, ``agent.responded``."""
    runner.before_call()
    params = dict(agent.params)
    if choices:
        params["choices"] = list(choices)
    request = ChatRequest(provider=agent.provider, model=agent.model,
                          system_prompt=agent.system_prompt, temperature=agent.temperature,
                          messages=tuple(messages), max_tokens=agent.max_tokens, params=params,
                          latency_ms=agent.latency_ms)
    runner._envelope_emit(AgentRequested, call, role=role, index=index,
                          provider=request.provider, model=request.model,
                          temperature=request.temperature, request_hash=request.request_hash,
                          **runner.env.redactor.redact_fields(  # hash above: unredacted
                              system_prompt=request.system_prompt, messages=list(messages),
                              params=params))
    try:
        served = runner.oracle.agent(call, request, role, index)
    except NodeFailure as failure:  # the call was made and failed: it is still a call
        runner._envelope_emit(CallFailed, call, kind="agent", role=role, index=index,
                              model=request.model, label=failure.label, error=failure.error,
                              request_hash=request.request_hash)
        raise
    if served.recorded:
        cost = served.cost_usd  # what the recording paid (prices may have changed since)
    elif served.label == "simulated":
        cost = 0.0
    else:
        cost = runner.env.prices.cost(request.model, served.input_tokens, served.output_tokens)
    runner._envelope_emit(AgentResponded, call, role=role, index=index, model=request.model,
                          text=served.text, input_tokens=served.input_tokens,
                          output_tokens=served.output_tokens, cost_usd=cost,
                          latency_ms=served.latency_ms, label=served.label,
                          request_hash=request.request_hash)
    return served.text


def _output_value(node: AgentNode, text: str) -> Any:
    if node.output == "text":
        return text
    try:
        return json.loads(text)
    except ValueError:
        raise NodeFailure("invalid_json", f"node {node.id!r} expects JSON output; got "
                          f"{text[:120]!r}") from None


def _agent_node(runner: Runner, node: AgentNode, call: NodeCall) -> str | None:
    graph = runner.graph
    user = {"role": "user", "content": render(node.prompt, call.reads)}
    tainted = reads_tainted(runner, call)
    if node.agent is not None:
        text = ask(runner, call, graph.resolve_agent(node.agent), [user], choices=node.choices)
        write_memory(runner, call, node.writes[0], _output_value(node, text), tainted)
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
            text = ask(runner, call, agent, messages, role=name, index=index,
                       choices=role.choices)
            answers.append(text)
            transcript.append(f"{name}{'' if index is None else f'[{i}]'}: {text}")
        if role.writes:
            write_memory(runner, call, role.writes, answers if role.count > 1 else answers[0], tainted)
    return None


# -- tools -----------------------------------------------------------------------------------


def tool_writes(node: ToolNode, result: Any) -> dict[str, Any]:
    if isinstance(result, dict) and result and set(result) <= set(node.writes):
        return result
    if len(node.writes) == 1:
        return {node.writes[0]: result}
    if not node.writes:
        return {}
    raise NodeFailure("invalid_tool_result", (
        f"tool node {node.id!r} writes {node.writes}; its tool must return a mapping of "
        f"those keys, got {canonical_json(result)[:120]}"
    ))


def _tool_node(runner: Runner, node: ToolNode, call: NodeCall) -> str | None:
    runner.before_call()
    args = {**node.params, **call.reads}
    runner._envelope_emit(ToolCalled, call, tool=node.tool, effect=node.effect,
                          args=runner.env.redactor.redact(args), args_hash=fingerprint(args))
    ctx = ToolContext(run_id=runner.run_id, node=node.id, occurrence=call.occurrence,
                      reflections=runner.env.reflections,
                      capture_reflections=runner.oracle.captures_reflections)
    try:
        result, label = runner.oracle.tool(call, node, args, ctx)
    except NodeFailure as failure:  # the tool raised: the call is still recorded and counted
        _discard_reflections(runner, call, ctx)
        runner._envelope_emit(CallFailed, call, kind="tool", role=None, index=None, model=None,
                              label=failure.label, error=failure.error,
                              request_hash=fingerprint(args))
        raise
    _discard_reflections(runner, call, ctx)
    recorded = isinstance(result, RecordedTool)
    runner._envelope_emit(ToolReturned, call, label=label, result=(
        result.result if recorded else runner.env.redactor.redact(result)))
    writes = result.writes if recorded else tool_writes(node, result)
    tainted = reads_tainted(runner, call, untrusted=not node.trusted)
    for key, value in sorted(writes.items()):  # key order: not stored
        write_memory(runner, call, key, value, tainted)
    return None


def _discard_reflections(runner: Runner, call: NodeCall, ctx: ToolContext) -> None:
    for captured in ctx.captured:
        runner._envelope_emit(ReflectionDiscarded, call, **captured)


# -- routers ---------------------------------------------------------------------------------


def _router_node(runner: Runner, node: RouterNode, call: NodeCall) -> str | None:
    from forklab.engine.planner import route_by_rules

    forced = runner.oracle.route(call, node)
    if forced is not None:
        target, reason, label = forced, "forced by a route change", "simulated"
    elif node.agent is not None:
        # sorted: a graph stored as JSON (jsonb, canonical JSON) keeps no key order, and the
        # order the answers are offered in is part of the request
        choices = sorted(node.choices or {})
        answer = ask(runner, call, runner.graph.resolve_agent(node.agent),
                     [{"role": "user", "content": render(node.prompt, call.reads)}],
                     choices=choices).strip()
        if answer not in (node.choices or {}):
            raise NodeFailure("unknown_route", f"router {node.id!r} got answer {answer!r}; "
                              f"expected one of {choices}")
        target, reason, label = (node.choices or {})[answer], f"agent answered {answer!r}", "live"
    else:
        target, reason = route_by_rules(node, call.reads, call.iteration)
        label = "live"
    runner._envelope_emit(RouteDecided, call, to=target, reason=reason, label=label)
    for key in node.writes:
        write_memory(runner, call, key, target, reads_tainted(runner, call))
    return target


# -- approvals -------------------------------------------------------------------------------


def _approval_node(runner: Runner, node: ApprovalNode, call: NodeCall) -> str | None:
    from forklab.engine.runner import Paused

    runner._envelope_emit(HumanRequested, call, prompt=node.prompt, context=call.reads)
    runner.flush()  # a human may take days: what the gate shows is stored first
    answer = runner.oracle.human(call, node)
    if answer is None:
        raise Paused()
    return finish_approval(runner, node, call, answer)


def finish_approval(runner: Runner, node: ApprovalNode, call: NodeCall,
                    answer: HumanAnswer) -> str | None:
    runner._envelope_emit(HumanAnswered, call, decision=answer.decision, data=answer.data,
                          memory_updates=dict(answer.memory_updates or {}),
                          label=answer.label, answered_by=answer.answered_by)
    if node.writes:
        write_memory(runner, call, node.writes[0], answer.decision, False)
    for key, value in sorted((answer.memory_updates or {}).items()):
        write_memory(runner, call, key, value, False)
    return node.on_reject if answer.decision == "rejected" else None


# -- substitution (a fork's output change) ---------------------------------------------------


def substitute_output(runner: Runner, node: Any, call: NodeCall,
                      memory: dict[str, Any]) -> str | None:
    """Write a change-supplied output instead of executing the node (label ``simulated``)."""
    if isinstance(node, AgentNode):
        runner._envelope_emit(AgentResponded, call, role=None, index=None, model="(simulated)",
                              text=canonical_json(memory), input_tokens=0, output_tokens=0,
                              cost_usd=0.0, latency_ms=0.0, label="simulated",
                              request_hash="simulated")
    elif isinstance(node, SubgraphNode):
        runner._envelope_emit(SubgraphCompleted, call, child_run_id="(simulated)",
                              status="completed", output=memory, label="simulated")
    else:
        runner._envelope_emit(ToolReturned, call, result=memory, label="simulated")
    for key, value in sorted(memory.items()):
        write_memory(runner, call, key, value, False)
    return None


__all__ = ["END", "ask", "execute", "finish_approval", "reads_tainted", "render", "write_memory"]
