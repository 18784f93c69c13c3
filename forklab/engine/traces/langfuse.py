"""A Langfuse trace export read as span records in the GenAI dialect (SPEC §8 "In").

The shape is the public API's trace with its observations (``GET
/api/public/traces/{id}``: ``{id, name, sessionId, observations: [{id, type, name,
parentObservationId, startTime, endTime, model, modelParameters, input, output, usage |
usageDetails, level, statusMessage}]}``), or a list of them, or ``{"data": [...]}``. Each
observation becomes the span a GenAI instrumentation would have made — ``GENERATION`` a
``chat`` span (OpenAI-format ``input`` messages and ``output`` message as
``gen_ai.input.messages`` / ``gen_ai.output.messages``), ``TOOL`` an ``execute_tool`` span,
``AGENT`` an ``invoke_agent`` span, others a plain span — under a root span for the trace
(its ``sessionId`` as ``gen_ai.conversation.id``), so the one mapping reads them. Content is
carried over as it is, never filled in; ``EVENT`` observations (points in time, not calls)
are rejected with that reason.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

from forklab.engine.canonical import fingerprint
from forklab.engine.traces.export import genai_message
from forklab.engine.traces.observed import loads_maybe
from forklab.engine.traces.otlp import OtlpDecodeError, Rejected, SpanRecord

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")


def is_langfuse(data: Any) -> bool:
    """Whether ``data`` looks like a Langfuse trace export (one, a list, or a page)."""
    traces = _traces(data)
    return bool(traces) and all(isinstance(t, dict) and "observations" in t for t in traces)


def read_langfuse(data: Any) -> tuple[list[SpanRecord], list[Rejected]]:
    """The spans of every trace in a Langfuse export; raises :class:`OtlpDecodeError` when
    it is not one."""
    if not is_langfuse(data):
        raise OtlpDecodeError("expected a Langfuse trace export: a trace object with "
                              "'observations' (or a list of them, or {'data': [...]})")
    spans: list[SpanRecord] = []
    rejected: list[Rejected] = []
    for trace in _traces(data):
        found, refused = _trace(trace)
        spans += found
        rejected += refused
    return spans, rejected


def _traces(data: Any) -> list[Any]:
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        return list(data["data"])
    if isinstance(data, list):
        return data
    return [data] if isinstance(data, dict) else []


def _id(value: Any, size: int) -> str:
    text = str(value).replace("-", "").lower()
    pattern = _HEX32 if size == 32 else _HEX16
    return text if pattern.match(text) else fingerprint({"id": str(value)})[:size]


def _ns(value: Any) -> int:
    if not value:
        return 0
    return int(datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() * 1e9)


def _trace(trace: dict[str, Any]) -> tuple[list[SpanRecord], list[Rejected]]:
    trace_id = _id(trace.get("id", ""), 32)
    root_id = _id(f"root:{trace.get('id')}", 16)
    spans: list[SpanRecord] = []
    rejected: list[Rejected] = []
    observations = [o for o in trace.get("observations") or () if isinstance(o, dict)]
    for obs in observations:
        if str(obs.get("type", "")).upper() == "EVENT":
            rejected.append(Rejected(_id(obs.get("id"), 16), obs.get("name"),
                                     "a Langfuse EVENT observation (a point in time, not a "
                                     "call)"))
            continue
        try:
            spans.append(_span(obs, trace_id, root_id))
        except (TypeError, ValueError) as exc:
            rejected.append(Rejected(None, obs.get("name"), f"unreadable observation: {exc}"))
    starts = [s.start_ns for s in spans] or [_ns(trace.get("timestamp"))]
    attributes: dict[str, Any] = {ga.GEN_AI_OPERATION_NAME: "invoke_workflow",
                                  ga.GEN_AI_WORKFLOW_NAME: trace.get("name") or "trace"}
    if trace.get("sessionId"):
        attributes[ga.GEN_AI_CONVERSATION_ID] = str(trace["sessionId"])
    root = SpanRecord(trace_id=trace_id, span_id=root_id, parent_id=None,
                      name=str(trace.get("name") or "trace"), start_ns=min(starts),
                      end_ns=max([s.end_ns for s in spans] + starts), attributes=attributes)
    return [root, *spans], rejected


def _span(obs: dict[str, Any], trace_id: str, root_id: str) -> SpanRecord:
    kind = str(obs.get("type", "SPAN")).upper()
    parent = obs.get("parentObservationId")
    start = _ns(obs.get("startTime"))
    attributes = (_generation(obs) if kind == "GENERATION" else _tool(obs) if kind == "TOOL"
                  else {ga.GEN_AI_OPERATION_NAME: "invoke_agent",
                        ga.GEN_AI_AGENT_NAME: obs.get("name")} if kind == "AGENT" else {})
    return SpanRecord(
        trace_id=trace_id, span_id=_id(obs.get("id"), 16),
        parent_id=_id(parent, 16) if parent else root_id, name=str(obs.get("name") or kind),
        start_ns=start, end_ns=max(start, _ns(obs.get("endTime"))),
        attributes={k: v for k, v in attributes.items() if v is not None},
        status_code=2 if obs.get("level") == "ERROR" else 0,
        status_message=str(obs.get("statusMessage") or ""))


def _generation(obs: dict[str, Any]) -> dict[str, Any]:
    params = obs.get("modelParameters") or {}
    usage = obs.get("usageDetails") or obs.get("usage") or {}
    attributes: dict[str, Any] = {
        ga.GEN_AI_OPERATION_NAME: "chat", ga.GEN_AI_REQUEST_MODEL: obs.get("model"),
        ga.GEN_AI_USAGE_INPUT_TOKENS: _int(usage.get("input")),
        ga.GEN_AI_USAGE_OUTPUT_TOKENS: _int(usage.get("output"))}
    if _number(params.get("temperature")) is not None:
        attributes[ga.GEN_AI_REQUEST_TEMPERATURE] = _number(params.get("temperature"))
    if _number(params.get("max_tokens")) is not None:
        attributes[ga.GEN_AI_REQUEST_MAX_TOKENS] = int(params["max_tokens"])
    messages = _messages(obs.get("input"))
    if messages is not None:
        attributes[ga.GEN_AI_INPUT_MESSAGES] = json.dumps([genai_message(m) for m in messages])
    reply = _reply(obs.get("output"))
    if reply is not None:
        attributes[ga.GEN_AI_OUTPUT_MESSAGES] = json.dumps([genai_message(reply)])
    return attributes


def _tool(obs: dict[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {ga.GEN_AI_OPERATION_NAME: "execute_tool",
                                  ga.GEN_AI_TOOL_NAME: obs.get("name")}
    if obs.get("input") is not None:
        attributes[ga.GEN_AI_TOOL_CALL_ARGUMENTS] = json.dumps(obs["input"], sort_keys=True)
    if obs.get("output") is not None:
        output = obs["output"]
        attributes[ga.GEN_AI_TOOL_CALL_RESULT] = output if isinstance(output, str) \
            else json.dumps(output, sort_keys=True)
    return attributes


def _neutral(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-format message as a neutral one."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    out: dict[str, Any] = {"role": str(message.get("role", "user")),
                           "content": "" if content is None else str(content)}
    calls = [{"id": str(c.get("id", "")), "name": str((c.get("function") or {}).get("name", "")),
              "arguments": loads_maybe((c.get("function") or {}).get("arguments"))}
             for c in message.get("tool_calls") or () if isinstance(c, dict)]
    if calls:
        out["tool_calls"] = calls
    if message.get("tool_call_id"):
        out["tool_call_id"] = str(message["tool_call_id"])
    return out


def _messages(value: Any) -> list[dict[str, Any]] | None:
    value = value.get("messages") if isinstance(value, dict) and "messages" in value else value
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return [_neutral(m) for m in value]
    return None  # not a conversation: not captured as one


def _reply(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        return {"role": "assistant", "content": value}
    if isinstance(value, dict) and "role" in value:
        return _neutral(value)
    if isinstance(value, dict) and isinstance(value.get("choices"), list) and value["choices"]:
        return _reply((value["choices"][0] or {}).get("message"))
    return None


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


__all__ = ["is_langfuse", "read_langfuse"]
