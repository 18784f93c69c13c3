"""The OpenInference dialect (``openinference.span.kind``, ``llm.*``, ``tool.*``), read into
the neutral call model, with the official ``openinference-semantic-conventions`` names."""

from __future__ import annotations

import re
from typing import Any

from openinference.semconv.trace import (
    MessageAttributes,
    MessageContentAttributes,
    OpenInferenceSpanKindValues,
    SpanAttributes,
    ToolAttributes,
    ToolCallAttributes,
)

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
    "unset OPENINFERENCE_HIDE_INPUTS, OPENINFERENCE_HIDE_OUTPUTS, "
    "OPENINFERENCE_HIDE_INPUT_MESSAGES and OPENINFERENCE_HIDE_OUTPUT_MESSAGES (or the "
    "TraceConfig flags of the same names) in the traced app")
_KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
_LLM = OpenInferenceSpanKindValues.LLM.value
_TOOL = OpenInferenceSpanKindValues.TOOL.value
_PARAM_NAMES = ("max_tokens", "max_completion_tokens", "top_p", "seed", "stop",
                "frequency_penalty", "presence_penalty")


def claims(span: SpanRecord) -> bool:
    return _KIND in span.attributes


def read(span: SpanRecord) -> Observed | str:
    kind = str(span.attributes.get(_KIND, "")).upper()
    if kind == _LLM:
        return _model(span)
    if kind == _TOOL:
        return _tool(span)
    attrs = span.attributes
    name = attrs.get(SpanAttributes.AGENT_NAME) or attrs.get(SpanAttributes.GRAPH_NODE_NAME)
    return Step(span_id=span.span_id, name=str(name or span.name),
                agent=kind == OpenInferenceSpanKindValues.AGENT.value,
                input=_value(attrs, SpanAttributes.INPUT_VALUE, SpanAttributes.INPUT_MIME_TYPE),
                output=_value(attrs, SpanAttributes.OUTPUT_VALUE,
                              SpanAttributes.OUTPUT_MIME_TYPE))


def _value(attrs: dict[str, Any], key: str, mime_key: str) -> Any:
    """``input.value`` / ``output.value`` as the app gave it: decoded when its mime type
    says JSON, else the text (a JSON-looking text the app sent as text stays text)."""
    value = attrs.get(key)
    if isinstance(value, str) and attrs.get(mime_key) == "application/json":
        return loads_maybe(value)
    return value


def _model(span: SpanRecord) -> ModelCall | str:
    attrs = span.attributes
    invocation = loads_maybe(attrs.get(SpanAttributes.LLM_INVOCATION_PARAMETERS))
    invocation = invocation if isinstance(invocation, dict) else {}
    model = attrs.get(SpanAttributes.LLM_MODEL_NAME) or invocation.get("model")
    if not model:
        return f"an LLM span without {SpanAttributes.LLM_MODEL_NAME}"
    provider = attrs.get(SpanAttributes.LLM_PROVIDER) or attrs.get(SpanAttributes.LLM_SYSTEM)
    inputs = _messages(attrs, SpanAttributes.LLM_INPUT_MESSAGES)
    outputs = _messages(attrs, SpanAttributes.LLM_OUTPUT_MESSAGES)
    system, messages = split_system(inputs) if inputs else (None, None)
    tools = _tools(attrs)
    temperature = invocation.get("temperature")
    return ModelCall(
        span_id=span.span_id, dialect="openinference", provider=str(provider or "unknown"),
        model=str(model), system_prompt=system, messages=messages,
        reply_text=str(outputs[0].get("content", "")) if outputs else None,
        reply_tool_calls=list(outputs[0].get("tool_calls", [])) if outputs else [],
        finish_reason=_optional(attrs.get("llm.finish_reason")),
        temperature=None if temperature is None else float(temperature),
        params={k: invocation[k] for k in _PARAM_NAMES if k in invocation},
        tools=tools, tool_choice=_tool_choice(invocation.get("tool_choice")),
        parallel_tool_calls=invocation.get("parallel_tool_calls")
        if isinstance(invocation.get("parallel_tool_calls"), bool) else None,
        response_format=_schema(invocation.get("response_format")),
        input_tokens=int(attrs.get(SpanAttributes.LLM_TOKEN_COUNT_PROMPT, 0)),
        output_tokens=int(attrs.get(SpanAttributes.LLM_TOKEN_COUNT_COMPLETION, 0)),
        capture_hint=CAPTURE_HINT)


def _tool_choice(value: Any) -> str | dict[str, Any] | None:
    """OpenAI's ``tool_choice`` in forklab's form (``{"name": tool}`` for a forced one)."""
    if isinstance(value, str) and value in ("auto", "required", "none"):
        return value
    if isinstance(value, dict):
        function = value.get("function")
        name = function.get("name") if isinstance(function, dict) else value.get("name")
        if isinstance(name, str) and name:
            return {"name": name}
    return None


def _schema(value: Any) -> dict[str, Any] | None:
    """OpenAI's ``response_format`` ``{"type": "json_schema", "json_schema": {"schema"}}``
    as the JSON Schema forklab records (other formats: None)."""
    if isinstance(value, dict) and value.get("type") == "json_schema":
        schema = (value.get("json_schema") or {}).get("schema")
        if isinstance(schema, dict):
            return schema
    return None


def _optional(value: Any) -> str | None:
    return None if value is None else str(value)


def _indexed(attrs: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """``prefix.N.rest`` attributes grouped by N: {N: {rest: value}}."""
    pattern = re.compile(re.escape(prefix) + r"\.(\d+)\.(.+)$")
    grouped: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        found = pattern.match(key)
        if found:
            grouped.setdefault(int(found[1]), {})[found[2]] = value
    return grouped


def _messages(attrs: dict[str, Any], prefix: str) -> list[Message] | None:
    grouped = _indexed(attrs, prefix)
    if not grouped:
        return None
    return [_message(grouped[n]) for n in sorted(grouped)]


def _message(flat: dict[str, Any]) -> Message:
    role = str(flat.get(MessageAttributes.MESSAGE_ROLE, "user"))
    content = flat.get(MessageAttributes.MESSAGE_CONTENT)
    if content is None:
        parts = _indexed(flat, MessageAttributes.MESSAGE_CONTENTS)
        content = "".join(str(parts[n].get(MessageContentAttributes.MESSAGE_CONTENT_TEXT, ""))
                          for n in sorted(parts))
    message: Message = {"role": role, "content": str(content)}
    calls = _indexed(flat, MessageAttributes.MESSAGE_TOOL_CALLS)
    if calls:
        message["tool_calls"] = [
            {"id": str(calls[n].get(ToolCallAttributes.TOOL_CALL_ID, "")),
             "name": str(calls[n].get(ToolCallAttributes.TOOL_CALL_FUNCTION_NAME, "")),
             "arguments": loads_maybe(
                 calls[n].get(ToolCallAttributes.TOOL_CALL_FUNCTION_ARGUMENTS_JSON))}
            for n in sorted(calls)]
    if MessageAttributes.MESSAGE_TOOL_CALL_ID in flat:
        message["tool_call_id"] = str(flat[MessageAttributes.MESSAGE_TOOL_CALL_ID])
    if MessageAttributes.MESSAGE_NAME in flat:
        message["name"] = str(flat[MessageAttributes.MESSAGE_NAME])
    return message


def _tools(attrs: dict[str, Any]) -> list[Any] | None:
    grouped = _indexed(attrs, SpanAttributes.LLM_TOOLS)
    if not grouped:
        return None
    found = [tool_definition(grouped[n].get(ToolAttributes.TOOL_JSON_SCHEMA))
             for n in sorted(grouped)]
    return [d for d in found if d is not None]


def _tool(span: SpanRecord) -> ToolExec | str:
    attrs = span.attributes
    name = attrs.get(SpanAttributes.TOOL_NAME) or span.name
    call_id = attrs.get(ToolCallAttributes.TOOL_CALL_ID) or attrs.get(SpanAttributes.TOOL_ID)
    return ToolExec(span_id=span.span_id, dialect="openinference", name=str(name),
                    call_id=None if call_id is None else str(call_id),
                    arguments=loads_maybe(attrs.get(SpanAttributes.INPUT_VALUE)),
                    result=attrs.get(SpanAttributes.OUTPUT_VALUE),
                    captured_arguments=SpanAttributes.INPUT_VALUE in attrs,
                    captured_result=SpanAttributes.OUTPUT_VALUE in attrs)


__all__ = ["CAPTURE_HINT", "claims", "read"]
