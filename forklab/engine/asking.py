"""One model call of a node: the request it sends, the events it records (SPEC §6.2, §6.4).

:func:`ask` is the only place a node asks a model: it emits ``agent.requested`` (the
rendered request, after redaction, with its call key), asks the run's oracle (which answers
live, from a recording, or as a change supplied) and emits ``agent.responded`` with the
reply — its text *and* the tool calls it asked for, never dropped. Agent nodes, agent
routers and the tool loop (:mod:`forklab.engine.agent_loop`) all go through it.
"""

from __future__ import annotations

import functools
import json
import re
import time
from typing import Any

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

from forklab.engine import telemetry
from forklab.engine.calls import turn_call
from forklab.engine.canonical import canonical_json
from forklab.engine.context import NodeContext
from forklab.engine.events import AgentRequested, AgentResponded, CallFailed
from forklab.engine.graph import AgentSpec
from forklab.engine.oracle import NodeFailure, Served
from forklab.engine.providers import ChatRequest, ToolDefinition
from forklab.engine.traces.export import genai_message

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")  # one group: its split alternates text, key


def render(template: str, reads: dict[str, Any]) -> str:
    """Fill ``{key}`` placeholders from the read slice (non-strings as canonical JSON)."""
    if not template:
        return canonical_json(reads)
    pieces = list(_pieces(template))
    for i in range(1, len(pieces), 2):  # the keys, between the literal texts
        v = reads.get(pieces[i], "")
        pieces[i] = v if isinstance(v, str) else canonical_json(v)
    return "".join(pieces)


@functools.lru_cache(maxsize=1024)
def _pieces(template: str) -> tuple[str, ...]:
    """``template`` split at its placeholders: literal text, key, literal text, … (a node's
    prompt is rendered once per execution; a join's holds one placeholder per branch, and
    a substitution callback per placeholder was ~4x the cost of filling the split)."""
    return tuple(_PLACEHOLDER.split(template))


def render_system(template: str, reads: dict[str, Any]) -> str:
    """An agent's system prompt with the ``{key}`` placeholders the node reads filled in.

    An agent may serve several nodes, so a placeholder the node does not read is left as
    written (a prompt quoting ``{json}`` keeps it), unlike :func:`render`."""
    if "{" not in template:
        return template
    pieces = list(_pieces(template))
    for i in range(1, len(pieces), 2):
        key = pieces[i]
        if key in reads:
            v = reads[key]
            pieces[i] = v if isinstance(v, str) else canonical_json(v)
        else:
            pieces[i] = "{" + key + "}"
    return "".join(pieces)


def chat_request(agent: AgentSpec, messages: list[dict[str, Any]],
                 choices: list[str] | None = None, *, system_prompt: str | None = None,
                 tools: tuple[ToolDefinition, ...] = (),
                 tool_choice: str | dict[str, Any] | None = None) -> ChatRequest:
    """The request ``ask`` sends (the scheduler bounds a call's cost from it up front).

    ``tools`` / ``tool_choice``: what this turn offers (the tool loop decides per turn);
    ``parallel_tool_calls`` is sent only with tools, ``response_format`` always when set."""
    params = dict(agent.params)
    if choices:
        params["choices"] = list(choices)
    return ChatRequest(provider=agent.provider, model=agent.model,
                       system_prompt=agent.system_prompt if system_prompt is None
                       else system_prompt,
                       temperature=agent.temperature,
                       messages=tuple(messages), max_tokens=agent.max_tokens, params=params,
                       latency_ms=agent.latency_ms, tools=tools,
                       tool_choice=tool_choice if tools or tool_choice == "none" else None,
                       parallel_tool_calls=agent.parallel_tool_calls if tools else None,
                       response_format=agent.response_format)


def ask(ctx: NodeContext, agent: AgentSpec, messages: list[dict[str, Any]],
        *, role: str | None = None, index: int | None = None,
        choices: list[str] | None = None, request: ChatRequest | None = None,
        call: str | None = None) -> Served:
    """One model call: ``agent.requested``, the oracle's answer, ``agent.responded``.

    ``request`` defaults to :func:`chat_request` of ``agent`` and ``messages``; ``call`` is
    the call key within the execution (``turn:2``), recorded only when it is not the first
    turn of its role instance — what a log without keys means (:func:`actions.call_of`), so
    a one-turn node records exactly what it always did."""
    ctx.check_cancel()
    key = call or turn_call(1, role, index)
    request = ctx.oracle.adjust(ctx.call, key, request or chat_request(agent, messages, choices))
    stored_key = None if key == turn_call(1, role, index) else key
    params = dict(request.params)
    request_hash = request.request_hash
    offered: dict[str, Any] = (
        {"tools": [t.to_wire() for t in request.tools]} if request.tools else {})
    for name in ("tool_choice", "parallel_tool_calls", "response_format"):
        if getattr(request, name) is not None:
            offered[name] = getattr(request, name)
    if request.unsent:  # the call's JSON says what was left to the vendor's default
        offered["unsent"] = sorted(request.unsent)
    ctx.emit(AgentRequested, role=role, index=index, provider=request.provider,
             model=request.model, temperature=request.temperature,
             request_hash=request_hash, call=stored_key, **offered,
             **ctx.env.redactor.redact_fields(  # hash above: unredacted
                 system_prompt=request.system_prompt, messages=list(request.messages),
                 params=params))
    ctx.before_call(model=True)  # the request is stored before the call (unless both it
    # and the run's calls are fast: Runner._before_model_call)
    started = time.time_ns()
    try:
        served = ctx.oracle.agent(ctx.call, request, role, index, key)
    except NodeFailure as failure:  # the call was made and failed: it is still a call
        ctx.emit(CallFailed, kind="agent", role=role, index=index, model=request.model,
                 label=failure.label, error=failure.error, request_hash=request_hash,
                 call=stored_key)
        _span(ctx, request, key, started, failure.label, None, None,
              error=str(failure.error.get("message", failure.error)))
        raise
    if served.recorded:
        cost = served.cost_usd  # what the recording paid (prices may have changed since)
    elif served.label == "simulated":
        cost = 0.0
    else:
        cost = ctx.env.prices.cost(request.model, served.input_tokens, served.output_tokens)
    extra: dict[str, Any] = {}
    if served.tool_calls:
        extra["tool_calls"] = [dict(c) for c in served.tool_calls]
    if served.finish_reason is not None and (served.tool_calls or request.tools):
        extra["finish_reason"] = served.finish_reason
    if served.attempts:
        extra["attempts"] = list(served.attempts)
    ctx.emit(AgentResponded, role=role, index=index, model=request.model, text=served.text,
             input_tokens=served.input_tokens, output_tokens=served.output_tokens,
             cost_usd=cost, latency_ms=served.latency_ms, label=served.label,
             request_hash=request_hash, call=stored_key, **extra)
    _span(ctx, request, key, started, served.label, served, cost)
    return served


def _span(ctx: NodeContext, request: ChatRequest, key: str, started: int, label: str,
          served: Served | None, cost: float | None, error: str | None = None) -> None:
    """The call's ``chat {model}`` span (telemetry; content only when capture is on)."""
    if not telemetry.tracing():
        return

    def content() -> dict[str, Any]:
        shown = ctx.env.redactor.redact_fields(system_prompt=request.system_prompt,
                                               messages=list(request.messages))
        found: dict[str, Any] = {
            ga.GEN_AI_INPUT_MESSAGES: json.dumps(
                [genai_message(m) for m in shown["messages"]], default=str)}
        if shown["system_prompt"]:
            found[ga.GEN_AI_SYSTEM_INSTRUCTIONS] = json.dumps(
                [{"type": "text", "content": shown["system_prompt"]}])
        if request.tools:
            found[ga.GEN_AI_TOOL_DEFINITIONS] = json.dumps(
                [{"type": "function", **t.to_wire()} for t in request.tools])
        if served is not None:
            reply = ctx.env.redactor.redact({"role": "assistant", "content": served.text,
                                             "tool_calls": list(served.tool_calls)})
            found[ga.GEN_AI_OUTPUT_MESSAGES] = json.dumps([genai_message(reply)], default=str)
        return found

    telemetry.call_span(
        f"chat {request.model}", started, time.time_ns(),
        telemetry.chat_attributes(
            run_id=ctx.run_id, key=f"{ctx.call.node}#{ctx.call.occurrence}/{key}",
            provider=request.provider, model=request.model, temperature=request.temperature,
            label=label, input_tokens=served.input_tokens if served else 0,
            output_tokens=served.output_tokens if served else 0,
            finish_reason=served.finish_reason if served else None, cost_usd=cost),
        content, error=error)


__all__ = ["ask", "chat_request", "render", "render_system"]
