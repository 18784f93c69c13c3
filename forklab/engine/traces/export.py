"""A run's calls as an OTLP JSON trace in the GenAI conventions (SPEC §8 "Out").

``forklab export RUN`` and ``GET /api/v1/runs/{id}/otlp/`` give this document, which
``forklab import`` reads back into an equal run: the same executions, calls (stored keys,
roles, requests, replies, tool calls and results, in recorded order), human decisions,
subgraph outcomes and token totals (the round-trip property test defines it and checks it
over every demo scenario and generated graphs). Spans: one root span for the run
(``invoke_workflow``), one per node execution (``invoke_agent`` for agent nodes, named by
the node id), a ``chat {model}`` span per model turn and an ``execute_tool {tool}`` span per
tool call under its node's span — each with the call key (``forklab.call.key``; none for a
tool node's own tool call), its provenance label (``forklab.call.label``), a role
instance's role and index, and the seqs of the events that opened and closed it
(``forklab.seq``, ``forklab.seq.end``) — and a ``human {node}`` / ``subgraph {graph}`` span
per human gate or subgraph holding its events (``forklab.event``, ``forklab.event.end``).
Message content is always included: the file is the run's own data (the live spans of
:mod:`forklab.engine.telemetry` carry none).

Ids are deterministic: the trace id and every span id are hashes of the run id (and the
event's seq); an imported run's export names its source trace on the root span
(``forklab.source.trace_id``) but is a trace of its own, so importing it beside its source
makes a second run rather than merging the two.

A fork's log holds its tail only: its export is the tail (what it inherited before its fork
point is in its base's export). A node the tail served whole from a recording
(``node.reused``: it carries the answers, not the requests) is exported with the calls of
the execution it was served from — found in the base's log by node and fingerprint (up the
lineage when the base served it too) through ``recording`` — each labelled ``reused``, so
importing a memoized fork's export gives its calls back, requests included. Without
``recording`` (or when the base is gone) a served node is a node span without calls.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as ga

from forklab.engine.calls import call_key, turn_call
from forklab.engine.canonical import fingerprint
from forklab.engine.events import (
    AgentRequested,
    AgentResponded,
    AnyEvent,
    CallFailed,
    HumanAnswered,
    HumanRequested,
    NodeCompleted,
    NodeFailed,
    NodeReused,
    NodeStarted,
    RunForked,
    RunStarted,
    SubgraphCompleted,
    SubgraphStarted,
    ToolCalled,
    ToolReturned,
    TraceImported,
)

CALL_KEY = "forklab.call.key"
CALL_LABEL = "forklab.call.label"
CALL_ROLE = "forklab.call.role"
CALL_INDEX = "forklab.call.index"
SEQ = "forklab.seq"
"""On a call span: the seq of the event that opened the call (``agent.requested``,
``tool.called``); with :data:`END_SEQ`, the seq of the event that closed it. Together they
let the import put a node's call events back in the order they were recorded."""
END_SEQ = "forklab.seq.end"
TOOL_EFFECT = "forklab.tool.effect"
EVENT = "forklab.event"
"""On a human gate's or a subgraph's span (calls the GenAI conventions have no span for):
the event that opened it as JSON ``{"type", "payload"}``; :data:`EVENT_END` the one that
closed it. The import rebuilds exactly these events (:data:`OWN_EVENTS`), nothing else."""
EVENT_END = "forklab.event.end"
OWN_EVENTS: dict[str, type[AnyEvent]] = {cls.TYPE: cls for cls in (
    HumanRequested, HumanAnswered, SubgraphStarted, SubgraphCompleted)}
RUN_ID = "forklab.run.id"
SOURCE_TRACE = "forklab.source.trace_id"
_PARAMS = {"max_tokens": ga.GEN_AI_REQUEST_MAX_TOKENS, "top_p": ga.GEN_AI_REQUEST_TOP_P,
           "top_k": ga.GEN_AI_REQUEST_TOP_K, "seed": ga.GEN_AI_REQUEST_SEED,
           "stop": ga.GEN_AI_REQUEST_STOP_SEQUENCES,
           "frequency_penalty": ga.GEN_AI_REQUEST_FREQUENCY_PENALTY,
           "presence_penalty": ga.GEN_AI_REQUEST_PRESENCE_PENALTY}


Recording = Callable[[str], Sequence[AnyEvent]]
"""A run's log by run id (``store.read``): where a served node's calls are found."""
_CALLS = (AgentRequested, AgentResponded, ToolCalled, ToolReturned, CallFailed)
MAX_LINEAGE = 50


def export_run(events: Sequence[AnyEvent], *, recording: Recording | None = None
               ) -> dict[str, Any]:
    """The run's ``ExportTraceServiceRequest`` as OTLP JSON (hex ids). Deterministic.
    ``recording`` reads other runs' logs: a served node's calls come from its base's."""
    return _Exporter(events, recording).run()


def served_calls(reused: NodeReused, base_run_id: str | None, recording: Recording
                 ) -> list[AnyEvent]:
    """The call events of the recorded execution ``reused`` was served from, as this
    execution's (its occurrence, the ``node.reused`` event's time, labelled ``reused``):
    the execution of the same node with the same fingerprint in the base's log — the
    same occurrence when it matches, else the first — followed up the lineage while the
    base served it too. Empty when none is found."""
    run_id = base_run_id
    for _ in range(MAX_LINEAGE):
        if not run_id:
            return []
        log = recording(run_id)  # a base that is gone reads empty: no calls are found
        starts = [e for e in log if isinstance(e, NodeStarted | NodeReused)
                  and e.node == reused.node and e.fingerprint == reused.fingerprint]
        if not starts:
            return []
        start = next((e for e in starts if e.occurrence == reused.occurrence), starts[0])
        if isinstance(start, NodeReused):
            forked = next((e for e in log if isinstance(e, RunForked)), None)
            run_id = forked.base_run_id if forked else None
            continue
        return [_as_served(e, reused) for e in _execution(log, start)
                if isinstance(e, _CALLS)]
    return []


def _execution(log: Sequence[AnyEvent], start: NodeStarted) -> list[AnyEvent]:
    """The events of ``start``'s execution (parallel branches interleave in a log)."""
    out: list[AnyEvent] = []
    for event in log:
        if event.seq <= start.seq or event.node != start.node \
                or event.occurrence != start.occurrence:
            continue
        if isinstance(event, NodeStarted | NodeReused):
            break
        out.append(event)
        if isinstance(event, NodeCompleted | NodeFailed):
            break
    return out


def _as_served(event: AnyEvent, reused: NodeReused) -> AnyEvent:
    changes: dict[str, Any] = {"occurrence": reused.occurrence, "at": reused.at}
    if isinstance(event, AgentResponded | ToolReturned | CallFailed):
        changes["label"] = "reused"
    return dataclasses.replace(event, **changes)


def value(v: Any) -> dict[str, Any]:
    """A Python value as an OTLP ``AnyValue``."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, list | tuple):
        return {"arrayValue": {"values": [value(x) for x in v]}}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": attributes(v)}}
    return {}


def attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": value(v)} for k, v in values.items() if v is not None]


def own_event(event: AnyEvent) -> str:
    """``event`` as the JSON an :data:`EVENT` attribute holds (its type and payload)."""
    return json.dumps({"type": event.type, "payload": event.payload()}, sort_keys=True)


def genai_message(message: dict[str, Any]) -> dict[str, Any]:
    """A neutral message in the GenAI ``{"role", "parts"}`` form."""
    if message.get("role") == "tool":
        part = {"type": "tool_call_response", "id": message.get("tool_call_id", ""),
                "response": message.get("content", "")}
        # not in the GenAI part schema, kept so the message reads back whole
        part.update({k: message[k] for k in ("name", "is_error") if k in message})
        return {"role": "tool", "parts": [part]}
    parts: list[dict[str, Any]] = []
    if message.get("content"):
        parts.append({"type": "text", "content": message["content"]})
    for call in message.get("tool_calls") or ():
        parts.append({"type": "tool_call", "id": call.get("id", ""), "name": call.get("name"),
                      "arguments": call.get("arguments")})
    return {"role": message.get("role", "user"), "parts": parts}


class _Exporter:
    def __init__(self, events: Sequence[AnyEvent], recording: Recording | None) -> None:
        self.events = events
        self.recording = recording
        forked = next((e for e in events if isinstance(e, RunForked)), None)
        self.base = forked.base_run_id if forked else None
        self.served: tuple[int, int] | None = None  # (node.reused seq, served call seq)
        self.run_id = events[0].run_id if events else ""
        imported = next((e for e in events if isinstance(e, TraceImported)), None)
        # forklab's rendition is a trace of its own: importing it next to the trace an
        # imported run came from must not merge the two (the source is named on the root)
        self.source = imported.trace_id if imported else None
        self.trace_id = fingerprint({"run": self.run_id})[:32]
        self.spans: list[dict[str, Any]] = []
        self.root: dict[str, Any] | None = None
        self.node: dict[str, Any] | None = None
        self.open: dict[str, dict[str, Any]] = {}  # call slot -> its open span
        self.last_ns = 0

    def span_id(self, seq: int) -> str:
        if self.served is not None:  # a served call: not an event of this run's log
            return fingerprint({"run": self.run_id, "seq": self.served[0],
                                "served": self.served[1]})[:16]
        return fingerprint({"run": self.run_id, "seq": seq})[:16]

    def start(self, seq: int, name: str, at: float, parent: dict[str, Any] | None,
              attrs: dict[str, Any]) -> dict[str, Any]:
        # strictly increasing in log order (a reader orders spans by start time; a run
        # recorded under a fixed clock has equal times), moved by nanoseconds at most
        self.last_ns = start = max(int(at * 1e9), self.last_ns + 1)
        span = {"traceId": self.trace_id, "spanId": self.span_id(seq), "name": name,
                "kind": 1, "startTimeUnixNano": str(start),
                "endTimeUnixNano": str(start), "attributes": attributes(attrs),
                "status": {}}
        if parent is not None:
            span["parentSpanId"] = parent["spanId"]
        self.spans.append(span)
        return span

    @staticmethod
    def end(span: dict[str, Any], at: float, attrs: dict[str, Any] | None = None,
            error: str | None = None) -> None:
        span["endTimeUnixNano"] = str(max(int(at * 1e9), int(span["startTimeUnixNano"])))
        span["attributes"] += attributes(attrs or {})
        if error is not None:
            span["status"] = {"code": 2, "message": error}

    def run(self) -> dict[str, Any]:
        for event in self.events:
            self.event(event)
        if self.root is not None and self.events:
            self.end(self.root, self.events[-1].at,
                     error="run failed" if self.events[-1].type == "run.failed" else None)
        return {"resourceSpans": [{
            "resource": {"attributes": attributes({"service.name": "forklab"})},
            "scopeSpans": [{"scope": {"name": "forklab.export"}, "spans": self.spans}]}]}

    def key(self, event: AnyEvent, call: str | None) -> str:
        """The full call key; a first turn's ``call`` is stored as None (asking.ask); a
        tool node's own tool call has none (empty)."""
        if call is None and (isinstance(event, AgentRequested | AgentResponded) or (
                isinstance(event, CallFailed) and event.kind == "agent")):
            call = turn_call(1, event.role, event.index)
        return call_key(event.node or "", event.occurrence or 1, call) or ""

    def slot(self, event: AnyEvent, call: str | None) -> str:
        """Where a call's open span waits for its end: its key, or for a tool node's own
        tool call (no key: one per execution) the execution."""
        return self.key(event, call) or f"{event.node}#{event.occurrence or 1}"

    def event(self, event: AnyEvent) -> None:
        if isinstance(event, RunStarted):
            self.root = self.start(event.seq, event.label or event.graph_id, event.at, None, {
                ga.GEN_AI_OPERATION_NAME: "invoke_workflow",
                ga.GEN_AI_WORKFLOW_NAME: event.label or event.graph_id, RUN_ID: self.run_id,
                SOURCE_TRACE: self.source})
        elif isinstance(event, NodeStarted | NodeReused):
            attrs = {ga.GEN_AI_OPERATION_NAME: "invoke_agent",
                     ga.GEN_AI_AGENT_NAME: event.node} if event.kind == "agent" else {}
            self.node = self.start(event.seq, event.node or "", event.at, self.root, attrs)
            if isinstance(event, NodeReused):
                if self.recording is not None:
                    for call in served_calls(event, self.base, self.recording):
                        self.served = (event.seq, call.seq)
                        self.event(call)
                    self.served = None
                self.end(self.node, event.at)
        elif isinstance(event, NodeCompleted | NodeFailed) and self.node is not None:
            self.end(self.node, event.at, error=event.error.get("message", "failed")
                     if isinstance(event, NodeFailed) else None)
        elif isinstance(event, AgentRequested):
            self.open[self.slot(event, event.call)] = self.start(
                event.seq, f"chat {event.model}", event.at, self.node, self.request(event))
        elif isinstance(event, AgentResponded):
            span = self.open.pop(self.slot(event, event.call), None)
            if span is not None:
                self.end(span, event.at, {**self.reply(event), END_SEQ: event.seq})
        elif isinstance(event, ToolCalled):  # a tool the model asked for, or a tool node's
            self.open[self.slot(event, event.call)] = self.start(
                event.seq, f"execute_tool {event.tool}", event.at, self.node, {
                    ga.GEN_AI_OPERATION_NAME: "execute_tool", ga.GEN_AI_TOOL_NAME: event.tool,
                    ga.GEN_AI_TOOL_CALL_ID: event.call_id,
                    ga.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps(event.args, sort_keys=True),
                    CALL_KEY: self.key(event, event.call) or None, TOOL_EFFECT: event.effect,
                    SEQ: event.seq})
        elif isinstance(event, ToolReturned):
            span = self.open.pop(self.slot(event, event.call), None)
            if span is not None:
                self.end(span, event.at, {ga.GEN_AI_TOOL_CALL_RESULT: event.result,
                                          CALL_LABEL: event.label, END_SEQ: event.seq})
        elif isinstance(event, CallFailed):
            span = self.open.pop(self.slot(event, event.call), None)
            if span is not None:
                self.end(span, event.at, {CALL_LABEL: event.label, END_SEQ: event.seq},
                         error=str(event.error.get("message", "failed")))
        elif isinstance(event, HumanRequested | SubgraphStarted):
            name = f"human {event.node}" if isinstance(event, HumanRequested) \
                else f"subgraph {event.graph_id}"
            self.open[self.gate(event)] = self.start(event.seq, name, event.at, self.node, {
                EVENT: own_event(event), SEQ: event.seq})
        elif isinstance(event, HumanAnswered | SubgraphCompleted):
            span = self.open.pop(self.gate(event), None)
            if span is not None:
                self.end(span, event.at, {EVENT_END: own_event(event), END_SEQ: event.seq,
                                          CALL_LABEL: event.label})

    @staticmethod
    def gate(event: HumanRequested | HumanAnswered | SubgraphStarted | SubgraphCompleted
             ) -> str:
        """Where a human gate's or a subgraph's open span waits for its end (a tool
        call's gate shares its call's key, so it is told apart by kind)."""
        kind = "subgraph" if isinstance(event, SubgraphStarted | SubgraphCompleted) \
            else "human"
        call = event.call if isinstance(event, HumanRequested | HumanAnswered) else None
        return f"{event.node}#{event.occurrence or 1}/{call or ''} {kind}"

    def request(self, event: AgentRequested) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            ga.GEN_AI_OPERATION_NAME: "chat", ga.GEN_AI_PROVIDER_NAME: event.provider,
            ga.GEN_AI_REQUEST_MODEL: event.model,
            ga.GEN_AI_REQUEST_TEMPERATURE: float(event.temperature),
            ga.GEN_AI_INPUT_MESSAGES: json.dumps([genai_message(m) for m in event.messages]),
            CALL_KEY: self.key(event, event.call), CALL_ROLE: event.role,
            CALL_INDEX: event.index, SEQ: event.seq}
        if event.system_prompt:
            attrs[ga.GEN_AI_SYSTEM_INSTRUCTIONS] = json.dumps(
                [{"type": "text", "content": event.system_prompt}])
        if event.tools:
            attrs[ga.GEN_AI_TOOL_DEFINITIONS] = json.dumps(
                [{"type": "function", **t} for t in event.tools])
        for name, attr in _PARAMS.items():
            if name in event.params:
                attrs[attr] = event.params[name]
        return attrs

    @staticmethod
    def reply(event: AgentResponded) -> dict[str, Any]:
        message = genai_message({"role": "assistant", "content": event.text,
                          "tool_calls": event.tool_calls})
        if event.finish_reason is not None:
            message["finish_reason"] = event.finish_reason
        return {ga.GEN_AI_OUTPUT_MESSAGES: json.dumps([message]),
                ga.GEN_AI_RESPONSE_MODEL: event.model,
                ga.GEN_AI_USAGE_INPUT_TOKENS: event.input_tokens,
                ga.GEN_AI_USAGE_OUTPUT_TOKENS: event.output_tokens,
                ga.GEN_AI_RESPONSE_FINISH_REASONS:
                    [event.finish_reason] if event.finish_reason else None,
                CALL_LABEL: event.label}


__all__ = ["CALL_INDEX", "CALL_KEY", "CALL_LABEL", "CALL_ROLE", "END_SEQ", "EVENT",
           "EVENT_END", "OWN_EVENTS", "SEQ", "TOOL_EFFECT", "Recording", "own_event", "export_run", "genai_message",
           "served_calls"]
