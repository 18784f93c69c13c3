"""The OpenTelemetry GenAI dialect (``gen_ai.*``), read into the neutral call model.

Content comes from the span attributes of the current conventions
(``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions``,
``gen_ai.tool.definitions``: JSON with ``parts``) or from the older per-message span events
(``gen_ai.system.message``, ``gen_ai.user.message``, ``gen_ai.assistant.message``,
``gen_ai.tool.message``, ``gen_ai.choice``). Attribute names are the official semconv
package's constants.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

from forklab.engine.traces.observed import (
    Message,
    ModelCall,
    Observed,
    Step,
    ToolExec,
    loads_maybe,
    split_system,
    tool_definition,
)
from forklab.engine.traces.otlp import SpanRecord

CAPTURE_HINT = (  # what turns capture on (the badge reads "turn on: <this>")
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true "
    "(with OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental: SPAN_ONLY or "
    "SPAN_AND_EVENT) in the traced app")
MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
AGENT_OPERATIONS = frozenset({"invoke_agent", "create_agent", "invoke_workflow"})
_LEGACY_EVENTS = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                  "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
_PARAMS = {ga.GEN_AI_REQUEST_MAX_TOKENS: "max_tokens", ga.GEN_AI_REQUEST_TOP_P: "top_p",
           ga.GEN_AI_REQUEST_TOP_K: "top_k", ga.GEN_AI_REQUEST_SEED: "seed",
           ga.GEN_AI_REQUEST_STOP_SEQUENCES: "stop",
           ga.GEN_AI_REQUEST_FREQUENCY_PENALTY: "frequency_penalty",
           ga.GEN_AI_REQUEST_PRESENCE_PENALTY: "presence_penalty"}


def claims(span: SpanRecord) -> bool:
    """Whether the span speaks this dialect."""
    return ga.GEN_AI_OPERATION_NAME in span.attributes


def read(span: SpanRecord) -> Observed | str:
    """The span as a call or step, or the reason it cannot be one."""
    attrs = span.attributes
    operation = str(attrs.get(ga.GEN_AI_OPERATION_NAME, ""))
    if operation == "execute_tool":
        return _tool(span)
    if operation in MODEL_OPERATIONS:
        return _model(span)
    if operation in AGENT_OPERATIONS:
        name = attrs.get(ga.GEN_AI_AGENT_NAME) or attrs.get(ga.GEN_AI_WORKFLOW_NAME)
        return Step(span_id=span.span_id, name=str(name or span.name),
                    agent=operation != "invoke_workflow")
    return Step(span_id=span.span_id, name=span.name)


def _model(span: SpanRecord) -> ModelCall | str:
    attrs = span.attributes
    model = attrs.get(ga.GEN_AI_REQUEST_MODEL) or attrs.get(ga.GEN_AI_RESPONSE_MODEL)
    if not model:
        return f"a {attrs.get(ga.GEN_AI_OPERATION_NAME)} span without {ga.GEN_AI_REQUEST_MODEL}"
    provider = attrs.get(ga.GEN_AI_PROVIDER_NAME) or attrs.get(ga.GEN_AI_SYSTEM) or "unknown"
    messages, reply, finish = _content(span)
    system = _system_instructions(attrs.get(ga.GEN_AI_SYSTEM_INSTRUCTIONS))
    if messages is not None:
        leading, messages = split_system(messages)
        system = system if system is not None else leading
    tools = _definitions(attrs.get(ga.GEN_AI_TOOL_DEFINITIONS))
    finishes = attrs.get(ga.GEN_AI_RESPONSE_FINISH_REASONS)
    temperature = attrs.get(ga.GEN_AI_REQUEST_TEMPERATURE)
    return ModelCall(
        span_id=span.span_id, dialect="genai", provider=str(provider), model=str(model),
        system_prompt=system, messages=messages,
        reply_text=None if reply is None else reply[0],
        reply_tool_calls=[] if reply is None else reply[1],
        finish_reason=finish or (str(finishes[0]) if isinstance(finishes, list) and finishes
                                 else None),
        temperature=None if temperature is None else float(temperature),
        params={name: attrs[key] for key, name in _PARAMS.items() if key in attrs},
        tools=tools, input_tokens=int(attrs.get(ga.GEN_AI_USAGE_INPUT_TOKENS, 0)),
        output_tokens=int(attrs.get(ga.GEN_AI_USAGE_OUTPUT_TOKENS, 0)),
        capture_hint=CAPTURE_HINT)


def _content(span: SpanRecord) -> tuple[list[Message] | None,
                                        tuple[str, list[dict[str, Any]]] | None, str | None]:
    """Request messages, the reply (text, tool calls) and its finish reason — from the
    attributes when present, else from the legacy span events."""
    attrs = span.attributes
    inputs = loads_maybe(attrs.get(ga.GEN_AI_INPUT_MESSAGES))
    outputs = loads_maybe(attrs.get(ga.GEN_AI_OUTPUT_MESSAGES))
    messages = [m for raw in inputs for m in _from_parts(raw)] \
        if isinstance(inputs, list) else None
    reply, finish = None, None
    if isinstance(outputs, list) and outputs and isinstance(outputs[0], dict):
        out = _from_parts(outputs[0])
        reply = (out[0].get("content", ""), list(out[0].get("tool_calls", []))) if out else None
        finish = outputs[0].get("finish_reason")
    if messages is None and reply is None:
        return _legacy(span)
    return messages, reply, finish


def _from_parts(raw: Any) -> list[Message]:
    """One ``{"role", "parts"}`` message as neutral messages (a tool role's responses
    become one ``tool`` message each)."""
    if not isinstance(raw, dict):
        return []
    role = str(raw.get("role", "user"))
    parts = raw.get("parts") or []
    texts = [str(p.get("content", "")) for p in parts
             if isinstance(p, dict) and p.get("type") == "text"]
    calls = [{"id": str(p.get("id") or ""), "name": str(p.get("name", "")),
              "arguments": loads_maybe(p.get("arguments"))}
             for p in parts if isinstance(p, dict) and p.get("type") == "tool_call"]
    responses = [p for p in parts
                 if isinstance(p, dict) and p.get("type") == "tool_call_response"]
    if responses:
        return [{"role": "tool", "tool_call_id": str(p.get("id") or ""),
                 "content": _text(p.get("response")),
                 **{k: p[k] for k in ("name", "is_error") if k in p}} for p in responses]
    message: Message = {"role": role, "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return [message]


def _legacy(span: SpanRecord) -> tuple[list[Message] | None,
                                       tuple[str, list[dict[str, Any]]] | None, str | None]:
    messages: list[Message] = []
    reply, finish = None, None
    for event in span.events:
        body = event.attributes
        if (event.name in _LEGACY_EVENTS and "content" in body) or (event.name in (
                "gen_ai.assistant.message",) and "tool_calls" in body):
            message: Message = {"role": _LEGACY_EVENTS[event.name],
                                "content": _text(body.get("content", ""))}
            if event.name == "gen_ai.tool.message":
                message["tool_call_id"] = str(body.get("id") or "")
            if body.get("tool_calls"):
                message["tool_calls"] = _legacy_calls(body["tool_calls"])
            messages.append(message)
        elif event.name == "gen_ai.choice":
            choice = loads_maybe(body.get("message")) or {}
            if isinstance(choice, dict) and ("content" in choice or "tool_calls" in choice):
                reply = (_text(choice.get("content") or ""),
                         _legacy_calls(choice.get("tool_calls") or []))
            finish = body.get("finish_reason")
    return (messages or None), reply, finish


def _legacy_calls(raw: Any) -> list[dict[str, Any]]:
    calls = []
    for call in loads_maybe(raw) or ():
        function = call.get("function") or {}
        calls.append({"id": str(call.get("id") or ""), "name": str(function.get("name", "")),
                      "arguments": loads_maybe(function.get("arguments"))})
    return calls


def _system_instructions(raw: Any) -> str | None:
    value = loads_maybe(raw)
    if value is None:
        return None
    if isinstance(value, list):
        return "".join(str(p.get("content", "")) for p in value if isinstance(p, dict))
    return _text(value)


def _definitions(raw: Any) -> list[Any] | None:
    value = loads_maybe(raw)
    if not isinstance(value, list):
        return None
    found = [tool_definition(item) for item in value]
    return [d for d in found if d is not None]


def _tool(span: SpanRecord) -> ToolExec | str:
    attrs = span.attributes
    name = attrs.get(ga.GEN_AI_TOOL_NAME)
    if not name:
        return f"an execute_tool span without {ga.GEN_AI_TOOL_NAME}"
    call_id = attrs.get(ga.GEN_AI_TOOL_CALL_ID)
    return ToolExec(span_id=span.span_id, dialect="genai", name=str(name),
                    call_id=None if call_id is None else str(call_id),
                    arguments=loads_maybe(attrs.get(ga.GEN_AI_TOOL_CALL_ARGUMENTS)),
                    result=attrs.get(ga.GEN_AI_TOOL_CALL_RESULT),
                    captured_arguments=ga.GEN_AI_TOOL_CALL_ARGUMENTS in attrs,
                    captured_result=ga.GEN_AI_TOOL_CALL_RESULT in attrs)


def _text(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


__all__ = ["CAPTURE_HINT", "claims", "read"]
