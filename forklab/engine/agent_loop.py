"""The tool loop of one agent node execution (SPEC §6.1, §6.2).

The model reads the conversation and answers with text or asks for tool calls; the tools
run; their results go back into the conversation; it loops until a reply asks for no tool
(the node's answer) or ``max_turns`` model turns have been made (the node fails,
``max_turns_exceeded``). Every model turn is a call keyed ``turn:N`` and every tool call
``turn:N/tool:M`` (:mod:`forklab.engine.calls`), each asked of the run's oracle — so a
recording, a change or the side-effect guard can answer any one of them.

Invariants:
- the first request is system + history + the rendered prompt; each later turn appends the
  assistant's reply and one ``tool`` message per tool call, in the order the model asked;
- tool calls of one turn may run at once (``parallel_tool_calls``, an oracle whose calls
  take time), but their events are recorded in the order the model asked for them, so the
  log does not depend on timing;
- a call to a tool the agent was not offered, arguments that fail the tool's schema and a
  tool that raises are answered to the model as an error result (recorded), never dropped;
- a call of an ``approval: true`` tool waits for a human first (a gate per call: the run
  pauses; approved, it runs; rejected, the model is told; edited, it runs with the edited
  arguments);
- ``tool_choice`` ``required`` / ``{name}`` binds the first turn only (then ``auto``), so a
  forced tool cannot loop until ``max_turns``;
- what the node writes — and, with ``history``, the conversation written back — is tainted
  when a read was or an untrusted tool answered.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

from forklab.engine import telemetry
from forklab.engine.asking import ask, chat_request, render, render_system
from forklab.engine.calls import tool_call, turn_call
from forklab.engine.canonical import canonical_json, fingerprint
from forklab.engine.context import NodeContext, write_memory
from forklab.engine.errors import ForklabError
from forklab.engine.events import (
    CallFailed,
    HumanAnswered,
    HumanRequested,
    ReflectionDiscarded,
    ToolCalled,
    ToolReturned,
)
from forklab.engine.graph import AgentNode, AgentSpec, ToolChoiceName, output_key
from forklab.engine.oracle import NodeFailure, Paused, ToolUse
from forklab.engine.status import CallLabel
from forklab.engine.tool_asks import ToolAsks
from forklab.engine.toolbox import OfferedTool, check_arguments, offered_tools
from forklab.engine.tools import ToolContext

Message = dict[str, Any]


def uses_loop(node: AgentNode, agent: AgentSpec) -> bool:
    """Whether a single-agent node runs the tool loop (else its one call, as always)."""
    return bool(agent.tools) or node.history is not None or agent.response_format is not None


def converse(ctx: NodeContext, node: AgentNode, agent: AgentSpec) -> None:
    """Run the loop for ``node`` and write its answer (and history) to memory."""
    reads = ctx.call.reads
    try:
        tools = offered_tools(ctx.graph, agent, ctx.env.tools)
    except ForklabError as exc:
        raise NodeFailure(exc.code, exc.message) from None
    messages = [*_history(node, reads), {"role": "user", "content": render(node.prompt, reads)}]
    system = render_system(agent.system_prompt, reads)
    tainted = ctx.reads_tainted()
    definitions = tuple(t.definition for t in tools.values())
    for turn in range(1, agent.turn_limit + 1):
        key = turn_call(turn)
        choice = _tool_choice(agent, turn)
        request = chat_request(agent, messages, node.choices, system_prompt=system,
                               tools=definitions, tool_choice=choice)
        served = ask(ctx, agent, messages, request=request, call=key)
        messages.append(_assistant(served.text, served.tool_calls))
        if not served.tool_calls:
            break
        if turn == agent.turn_limit:
            raise NodeFailure("max_turns_exceeded", (
                f"agent node {node.id!r} still asked for tool calls at its last allowed turn "
                f"({agent.turn_limit}); raise the agent's max_turns or change its prompt"))
        results = _run_tools(ctx, key, served.tool_calls, tools, agent,
                             "live" if served.label in ("changed", "live") else served.label)
        tainted = tainted or any(not tools[c["name"]].spec.trusted
                                 for c in served.tool_calls if c.get("name") in tools)
        messages.extend(results)
    write_memory(ctx, output_key(node), _answer(node, agent, served.text), tainted)
    if node.history is not None:
        write_memory(ctx, node.history, messages, tainted)


def _history(node: AgentNode, reads: dict[str, Any]) -> list[Message]:
    if node.history is None:
        return []
    held = reads.get(node.history)
    if held is None:
        return []
    if not isinstance(held, list) or not all(
            isinstance(m, dict) and m.get("role") in ("system", "user", "assistant", "tool")
            for m in held):
        raise NodeFailure("invalid_history", (
            f"memory key {node.history!r} (the history of node {node.id!r}) must hold a list "
            "of messages ({role: system|user|assistant|tool, content, ...}); got "
            f"{canonical_json(held)[:120]}"))
    return list(held)


def _tool_choice(agent: AgentSpec, turn: int) -> str | dict[str, Any] | None:
    choice = agent.tool_choice
    if choice is None or choice in ("auto", "none"):
        return choice
    if turn > 1:
        return "auto"  # a forced choice binds the first turn (module docstring)
    return {"name": choice.name} if isinstance(choice, ToolChoiceName) else choice


def _assistant(text: str, tool_calls: Sequence[dict[str, Any]]) -> Message:
    message: Message = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [dict(c) for c in tool_calls]
    return message


def _answer(node: AgentNode, agent: AgentSpec, text: str) -> Any:
    """The value the node writes: the text, or the parsed (and checked) structured output."""
    if agent.response_format is None and node.output == "text":
        return text
    try:
        value = json.loads(text)
    except ValueError:
        raise NodeFailure("invalid_json", f"node {node.id!r} expects JSON output; got "
                          f"{text[:120]!r}") from None
    if agent.response_format is not None:
        from jsonschema import Draft202012Validator

        error = next(iter(Draft202012Validator(agent.response_format).iter_errors(value)), None)
        if error is not None:
            raise NodeFailure("invalid_structured_output", (
                f"node {node.id!r}: the answer does not match the agent's response_format: "
                f"{error.message}"))
    return value


# -- tool calls ------------------------------------------------------------------------------


def _run_tools(ctx: NodeContext, turn: str, asked: Sequence[dict[str, Any]],
               tools: dict[str, OfferedTool], agent: AgentSpec,
               refusal_label: CallLabel) -> list[Message]:
    """Make the tool calls of one turn; the ``tool`` messages answering them, in order.

    A call that cannot be made (unknown tool, bad arguments) is recorded as a failed call
    labelled like the turn that asked for it (``refusal_label``): a reply served again
    asks again, and is refused again, without anything running."""
    uses: list[ToolUse | str] = []
    for n, requested in enumerate(asked, start=1):
        key = tool_call(turn, n)
        use = _use(key, requested, tools)
        uses.append(use)
        if isinstance(use, ToolUse):
            ctx.emit(ToolCalled, tool=use.name, effect=use.effect,
                     args=ctx.env.redactor.redact(use.args), args_hash=use.args_hash,
                     call=use.call, call_id=use.call_id)
            continue
        arguments = requested.get("arguments")
        args = arguments if isinstance(arguments, dict) else {"$raw": arguments}
        ctx.emit(ToolCalled, tool=str(requested.get("name", "")), effect="read",
                 args=ctx.env.redactor.redact(args), args_hash=fingerprint(args), call=key,
                 call_id=str(requested.get("id", "")))
        code = "unknown_tool" if requested.get("name") not in tools else "invalid_arguments"
        ctx.emit(CallFailed, kind="tool", role=None, index=None, model=None,
                 label=refusal_label, error={"type": code, "message": use[len("error: "):]},
                 request_hash=fingerprint(args), call=key)
    ctx.check_cancel()
    uses = [_gate(ctx, use, tools[use.name]) if isinstance(use, ToolUse) and use.approval
            else use for use in uses]
    ctx.before_call()  # what the tools are called with is stored before any runs
    runnable = [u for u in uses if isinstance(u, ToolUse)]
    concurrent = (len(runnable) > 1 and agent.parallel_tool_calls is not False
                  and ctx.oracle.overlaps_calls)
    times: dict[str, tuple[int, int]] = {}  # each call's span times (telemetry)

    def timed(use: ToolUse) -> _Outcome:
        started = time.time_ns()
        try:
            return _call_tool(ctx, use)
        finally:
            times[use.call] = (started, time.time_ns())

    if concurrent:
        with ThreadPoolExecutor(max_workers=min(8, len(runnable))) as pool:
            outcomes = dict(zip((u.call for u in runnable), pool.map(timed, runnable),
                                strict=True))
    else:
        outcomes = {u.call: timed(u) for u in runnable}
    messages = []
    for requested, use in zip(asked, uses, strict=True):
        if isinstance(use, str):
            content = use
        else:
            content = _record(ctx, use, outcomes[use.call])
            _tool_span(ctx, use, outcomes[use.call], times[use.call])
        messages.append({"role": "tool", "tool_call_id": str(requested.get("id", "")),
                         "name": str(requested.get("name", "")), "content": content})
    return messages


def _gate(ctx: NodeContext, use: ToolUse, tool: OfferedTool) -> ToolUse | str:
    """An ``approval: true`` tool's gate: the run pauses until a human approves the call,
    rejects it (the model is told) or edits its arguments (checked like the model's)."""
    ctx.emit(HumanRequested, prompt=use.gate_prompt, context=use.inputs, call=use.call)
    ctx.before_call()  # a viewer (or a crash) sees the request before anyone answers it
    answer = ctx.oracle.human_call(ctx.call, use)
    if answer is None:
        raise Paused()
    ctx.emit(HumanAnswered, decision=answer.decision, data=answer.data, memory_updates={},
             label=answer.label, answered_by=answer.answered_by, call=use.call)
    if answer.decision == "rejected":
        return f"error: a human rejected this call of {use.name!r}; do not call it again"
    if answer.decision != "edited" or answer.data is None:
        return use
    problem = check_arguments(tool, answer.data)
    if problem is not None or not isinstance(answer.data, dict):
        return f"error: the edited arguments cannot be used: {problem}"
    return dataclasses.replace(use, args=answer.data, args_hash=fingerprint(answer.data))


def _use(key: str, requested: dict[str, Any], tools: dict[str, OfferedTool]) -> ToolUse | str:
    """The call to make, or the error text answering a call that cannot be made."""
    name, arguments = str(requested.get("name", "")), requested.get("arguments")
    tool = tools.get(name)
    if tool is None:
        return (f"error: unknown tool {name!r}; the tools offered are: "
                f"{', '.join(tools) or 'none'}")
    problem = check_arguments(tool, arguments)
    if problem is not None or not isinstance(arguments, dict):
        return f"error: {problem}"
    return ToolUse(call=key, call_id=str(requested.get("id", "")), name=name,
                   fn=tool.spec.fn, effect=tool.spec.effect, trusted=tool.spec.trusted,
                   args=arguments, args_hash=fingerprint(arguments), invoke=tool.invoke,
                   approval=tool.spec.approval)


_Outcome = tuple[Any, str, ToolContext] | tuple[NodeFailure, None, ToolContext]


def _call_tool(ctx: NodeContext, use: ToolUse) -> _Outcome:
    asks = ToolAsks(ctx, use.call)
    tool_ctx = ToolContext(run_id=ctx.run_id, node=ctx.call.node,
                           occurrence=ctx.call.occurrence, reflections=ctx.env.reflections,
                           capture_reflections=ctx.oracle.captures_reflections, asker=asks)
    try:
        result, label = ctx.oracle.tool_call(ctx.call, use, tool_ctx)
    except NodeFailure as failure:
        return failure, None, tool_ctx
    return result, label, tool_ctx


def _tool_span(ctx: NodeContext, use: ToolUse, outcome: _Outcome,
               times: tuple[int, int]) -> None:
    """The call's ``execute_tool {tool}`` span (arguments and result only with capture)."""
    if not telemetry.tracing():
        return
    result, label, _ = outcome
    failed = isinstance(result, NodeFailure)
    telemetry.call_span(
        f"execute_tool {use.name}", times[0], times[1],
        telemetry.tool_attributes(run_id=ctx.run_id,
                                  key=f"{ctx.call.node}#{ctx.call.occurrence}/{use.call}",
                                  tool=use.name, call_id=use.call_id,
                                  label=result.label if isinstance(result, NodeFailure)
                                  else label),
        lambda: {ga.GEN_AI_TOOL_CALL_ARGUMENTS: telemetry.as_text(
                     ctx.env.redactor.redact(use.args)),
                 ga.GEN_AI_TOOL_CALL_RESULT: None if failed else telemetry.as_text(
                     ctx.env.redactor.redact(result))},
        error=str(result.error.get("message")) if isinstance(result, NodeFailure) else None)


def _record(ctx: NodeContext, use: ToolUse, outcome: _Outcome) -> str:
    """Record one tool call's outcome; the content of the ``tool`` message answering it."""
    result, label, tool_ctx = outcome
    if isinstance(tool_ctx.asker, ToolAsks):
        tool_ctx.asker.record()  # its asks, in order, before its result
    for captured in tool_ctx.captured:
        ctx.emit(ReflectionDiscarded, **captured)
    if isinstance(result, NodeFailure):
        ctx.emit(CallFailed, kind="tool", role=None, index=None, model=None,
                 label=result.label, error=result.error, request_hash=use.args_hash,
                 call=use.call)
        return f"error: {result.error['type']}: {result.error['message']}"
    ctx.emit(ToolReturned, result=ctx.env.redactor.redact(result), label=label,
             call=use.call)
    return result if isinstance(result, str) else canonical_json(result)


__all__ = ["converse", "uses_loop"]
