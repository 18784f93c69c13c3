"""An imported run as the recording of a registered workflow (SPEC §8 (b)).

When a trace's agent or workflow name is mapped to a ``@forklab.workflow`` (the
``FORKLAB_WORKFLOW_MAP`` setting), the run the trace became is re-read as that workflow's
run: one ``workflow`` node execution whose calls are the imported calls, keyed as the SDK
keys the calls the code makes (SPEC §7) — so a fork re-executes the code and the imported
calls answer its prefix, exactly as for a run forklab recorded.

- model calls, in log (span) order: ``WF#1/openai:N`` / ``WF#1/anthropic:N`` by provider
  (a provider naming ``anthropic`` is the ``anthropic`` client; any other the ``openai``
  one, which also reaches the OpenAI-compatible endpoints);
- tool calls, in log order, by tool name: ``WF#1/tool:NAME#N`` — the ``@forklab.tool``
  calls the code makes. Their effect is the declared one (``tool_effects``), ``read`` when
  the tool is not declared. A result the trace captured only as the text of the ``tool``
  message answering the call is served decoded when that text is JSON (the code wrote its
  tool's JSON result into the message); the next call's prefix check verifies it;
- each model call's ``request_hash`` is its *captured hash* (:mod:`forklab.engine.captured`):
  a fork compares the code's request with what the trace captured — model, system prompt,
  messages, tools offered when recorded, recorded parameters — not forklab's whole-request
  hash; an inspect-only call records :data:`~forklab.engine.captured.INSPECT_ONLY`;
- the run's input is the workflow's arguments (:func:`workflow_input`, never guessed), its
  output the value the mapped span captured as its output, when it captured one.

The ``trace.imported`` event is kept, keyed by the new call keys (each call also names the
imported call it came from, ``imported_call``), so every surface still says which calls
are replayable. Pure: no I/O; equal inputs give equal events.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Any

from forklab.engine.calls import call_key
from forklab.engine.captured import INSPECT_ONLY, SETTINGS, captured_hash, projection
from forklab.engine.errors import WorkflowInputMissing
from forklab.engine.events import (
    AgentRequested,
    AgentResponded,
    AnyEvent,
    CallFailed,
    MemoryWritten,
    NodeCompleted,
    NodeFailed,
    NodeStarted,
    RunCompleted,
    RunFailed,
    RunStarted,
    ToolCalled,
    ToolReturned,
    TraceImported,
)
from forklab.engine.graph import GraphSpec, WorkflowNode
from forklab.engine.planner import node_fingerprint, read_slice
from forklab.engine.providers.base import ChatRequest, ToolDefinition
from forklab.engine.traces.mapping import node_id, observe
from forklab.engine.traces.observed import Step, loads_maybe
from forklab.engine.traces.otlp import SpanRecord

_TOOL_NAME = re.compile(r"[^A-Za-z0-9_\-]+")


@dataclass(frozen=True, slots=True)
class WorkflowRecording:
    """The workflow run an imported run becomes: its events and its calls' import info."""

    events: list[AnyEvent]
    calls: list[dict[str, Any]]  # the trace.imported info, by the workflow's call keys


@dataclass(frozen=True, slots=True)
class StepIO:
    """What the mapped span captured as the workflow's input and output (``found``: a span
    of that name exists; ``None`` values: not captured)."""

    found: bool
    input: Any = None
    output: Any = None
    has_output: bool = False


def step_io(spans: Iterable[SpanRecord], names: AbstractSet[str]) -> StepIO:
    """The input and output captured by the first span (in start order) that is a step
    named one of ``names`` (its agent or workflow name, its span name, or the node id made
    of its name): OpenInference
    ``input.value`` / ``output.value``, decoded when their mime type is JSON."""
    for span in sorted(spans, key=lambda s: (s.start_ns, s.span_id)):
        found = observe(span)
        if isinstance(found, Step) and not names.isdisjoint(
                (found.name, span.name, node_id(found.name))):
            return StepIO(found=True, input=found.input, output=found.output,
                          has_output=found.output is not None)
    return StepIO(found=False)


def workflow_input(captured: Any, *, workflow: str, parameters: Sequence[str],
                   required: Collection[str], span: str,
                   supplied: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The workflow's arguments: ``supplied`` (a fork request's input patch) when given,
    else what span ``span`` captured as its input — a JSON object naming only the
    function's ``parameters`` and all its ``required`` ones. Anything else is
    ``workflow_input_missing``, saying how to capture or supply them: arguments are never
    guessed from the conversation."""
    given = dict(supplied) if supplied else captured
    source = "the fork request's input patch" if supplied else f"span {span!r}'s input.value"
    if isinstance(given, dict) and set(given) <= set(parameters) and set(required) <= set(
            given):
        return dict(given)
    wanted = ", ".join(parameters) or "none"
    if given is None:
        found = "captured no input"
    elif isinstance(given, dict):
        found = f"holds keys {sorted(given)}"
    else:
        found = f"is {type(given).__name__} {str(given)[:80]!r}, not a JSON object"
    raise WorkflowInputMissing(
        f"workflow {workflow!r} takes arguments ({wanted}; required: "
        f"{', '.join(sorted(required)) or 'none'}) but {source} {found}; record them on the "
        "span the workflow runs in (OpenInference input.value as a JSON object, e.g. the "
        "tracer.agent decorator) and send the trace again, or fork with an input patch giving "
        'them ({"kind": "input_patch", "patch": {...}})',
        workflow=workflow, parameters=list(parameters), required=sorted(required))


def _vendor(provider: str) -> str:
    return "anthropic" if "anthropic" in provider.lower() else "openai"


def _tool_name(name: str) -> str:
    cleaned = _TOOL_NAME.sub("_", name).strip("_") or "tool"
    return cleaned if re.match(r"[A-Za-z_]", cleaned) else f"t_{cleaned}"


def _trace_request(event: AgentRequested) -> ChatRequest:
    """The request the trace captured, with a captured output bound in ``max_tokens`` (as
    the SDK reads a request), so both sides project alike."""
    params = dict(event.params)
    bound = params.pop("max_completion_tokens", None) or params.pop("max_tokens", None)
    return ChatRequest(
        provider=event.provider, model=event.model, system_prompt=event.system_prompt,
        temperature=event.temperature, messages=tuple(event.messages),
        max_tokens=int(bound) if isinstance(bound, int | float) else 256, params=params,
        tools=tuple(ToolDefinition(**t) for t in event.tools or ()),
        tool_choice=event.tool_choice, parallel_tool_calls=event.parallel_tool_calls,
        response_format=event.response_format)


def request_hash_of(event: AgentRequested, info: Mapping[str, Any]) -> str:
    """The captured hash of an imported model call (:data:`INSPECT_ONLY` when its content
    was not captured): the parts the trace recorded — model, system prompt and messages
    always, tools when it recorded some, temperature unless it was a default, each recorded
    parameter, and the tool settings it recorded."""
    if not info.get("replayable", False):
        return INSPECT_ONLY
    parts = ["model", "system", "messages"]
    if event.tools:
        parts.append("tools")
    if "temperature" not in (info.get("defaults") or ()):
        parts.append("temperature")
    parts += [f"param.{name}" for name in event.params]
    parts += [name for name in SETTINGS if getattr(event, name) is not None]
    return captured_hash(projection(_trace_request(event), parts))


class _Converter:
    """Appends the workflow run's events, numbering them, keying the imported calls."""

    def __init__(self, run_id: str, graph: GraphSpec, imported: TraceImported,
                 tool_effects: Mapping[str, str]) -> None:
        node = graph.node(graph.start)
        assert isinstance(node, WorkflowNode)
        self.run_id, self.node, self.effects = run_id, node, tool_effects
        self.info = {c["call"]: c for c in imported.calls if c.get("call")}
        self.orphans = [c for c in imported.calls if not c.get("call")]  # unkeyed tool spans
        self.events: list[AnyEvent] = []
        self.calls: list[dict[str, Any]] = []
        self.keys: dict[str, str] = {}  # imported call key -> the workflow's call part
        self.hashes: dict[str, str] = {}  # imported call key -> its captured hash
        self.counts: dict[str, int] = {}
        self.open_tool: str | None = None  # the last tool call keyed (an unkeyed result's)

    def emit(self, event: AnyEvent, *, in_node: bool = True, **fields: Any) -> None:
        envelope = {"node": self.node.id, "occurrence": 1, "iteration": 1} if in_node else {}
        self.events.append(replace(event, run_id=self.run_id, seq=len(self.events) + 1,
                                   **envelope, **fields))  # type: ignore[arg-type]

    def keyed(self, source: str, prefix: str, info: Mapping[str, Any]) -> str:
        """A new workflow call part ``prefix`` + N for imported call ``source``."""
        self.counts[prefix] = n = self.counts.get(prefix, 0) + 1
        self.keys[source] = key = f"{prefix}{n}"
        self.calls.append({**info, "call": call_key(self.node.id, 1, key),
                           "imported_call": source})
        return key

    @staticmethod
    def source(event: AnyEvent, call: str | None) -> str:
        return f"{event.node}#{event.occurrence}/{call or 'turn:1'}"

    def model(self, event: AgentRequested) -> None:
        source = self.source(event, event.call)
        info = self.info.get(source, {"kind": "agent", "replayable": False,
                                      "missing": ["request"]})
        key = self.keyed(source, f"{_vendor(event.provider)}:", info)
        self.hashes[source] = request_hash_of(event, info)
        self.emit(event, call=key, request_hash=self.hashes[source])

    def answer(self, event: AgentResponded | CallFailed) -> None:
        source = self.source(event, event.call)
        self.emit(event, call=self.keys[source],
                  request_hash=self.hashes.get(source, INSPECT_ONLY))

    def tool(self, event: ToolCalled) -> None:
        name = _tool_name(event.tool)
        if event.call is not None:
            source = self.source(event, event.call)
            info = self.info.get(source, {"kind": "tool", "replayable": False,
                                          "missing": ["tool result"]})
        else:  # a tool span no model turn asked for: its info is the next of its name
            source = f"{event.node}#{event.occurrence}/span@{event.seq}"
            found = next((c for c in self.orphans if c.get("tool") == event.tool), None)
            if found is not None:
                self.orphans.remove(found)
            info = found or {"kind": "tool", "replayable": False, "missing": ["tool result"]}
        self.open_tool = key = self.keyed(source, f"tool:{name}#", info)
        self.emit(event, tool=name, effect=self.effects.get(name, "read"), call=key,
                  call_id=key)

    def returned(self, event: ToolReturned | CallFailed) -> None:
        key = self.keys[self.source(event, event.call)] if event.call else self.open_tool
        info = next(c for c in self.calls if c["call"] == call_key(self.node.id, 1, str(key)))
        if isinstance(event, CallFailed):
            self.emit(event, call=key)
            return
        result = event.result
        if info.get("result_from") == "next request":
            result = loads_maybe(result)  # the code wrote its tool's JSON into the message
        self.emit(event, call=key, result=result)


def as_workflow(events: Sequence[AnyEvent], *, graph: GraphSpec, graph_version: int,
                run_id: str, input: Mapping[str, Any], output: StepIO | None = None,
                tool_effects: Mapping[str, str] | None = None,
                label: str = "") -> WorkflowRecording:
    """The imported run ``events`` (its whole log) as a run of the one-node workflow
    ``graph`` (version ``graph_version``) under id ``run_id``, started with ``input``;
    ``output``: what the mapped span captured (written as the workflow's output when it
    captured one). Raises ValueError for a log that is not an imported run's."""
    imported = next((e for e in events[:3] if isinstance(e, TraceImported)), None)
    first = events[0] if events else None
    if imported is None or not isinstance(first, RunStarted):
        raise ValueError("not the log of a run imported from a trace")
    conv = _Converter(run_id, graph, imported, tool_effects or {})
    node = conv.node
    reads = read_slice(list(node.reads), dict(input))
    conv.emit(RunStarted(run_id=run_id, seq=0, at=first.at, graph_id=graph.id,
                         graph_version=graph_version, graph_hash=graph.content_hash,
                         input=dict(input), start=graph.start, label=label[:200]),
              in_node=False)
    conv.emit(imported, in_node=False)  # its calls are re-keyed below
    body = [e for e in events if isinstance(
        e, AgentRequested | AgentResponded | CallFailed | ToolCalled | ToolReturned)]
    conv.emit(NodeStarted(run_id=run_id, seq=0, at=body[0].at if body else first.at,
                          kind="workflow", reads=reads,
                          fingerprint=node_fingerprint(graph, node.id, reads, occurrence=1,
                                                       iteration=1)))
    for event in body:
        if isinstance(event, AgentRequested):
            conv.model(event)
        elif isinstance(event, AgentResponded) or (
                isinstance(event, CallFailed) and event.kind == "agent"):
            conv.answer(event)
        elif isinstance(event, ToolCalled):
            conv.tool(event)
        else:
            conv.returned(event)
    _finish(conv, events, output)
    conv.events[1] = replace(imported, run_id=run_id, seq=2, calls=conv.calls)
    return WorkflowRecording(events=conv.events, calls=conv.calls)


def _finish(conv: _Converter, events: Sequence[AnyEvent], output: StepIO | None) -> None:
    last = events[-1]
    end = last.at
    failed = next((e for e in events if isinstance(e, NodeFailed)), None)
    if output is not None and output.has_output and failed is None:
        conv.emit(MemoryWritten(run_id=conv.run_id, seq=0, at=end, key=conv.node.writes[0],
                                value=output.output))
    if failed is not None or isinstance(last, RunFailed):
        error = failed.error if failed is not None else {"code": "span_error",
                                                          "message": "error"}
        conv.emit(NodeFailed(run_id=conv.run_id, seq=0, at=end, error=dict(error)))
        conv.emit(RunFailed(run_id=conv.run_id, seq=0, at=end,
                            error=dict(last.error) if isinstance(last, RunFailed)
                            else dict(error)), in_node=False)
        return
    conv.emit(NodeCompleted(run_id=conv.run_id, seq=0, at=end, next=[]))
    conv.emit(RunCompleted(run_id=conv.run_id, seq=0, at=end), in_node=False)


__all__ = ["StepIO", "WorkflowRecording", "as_workflow", "request_hash_of", "step_io",
           "workflow_input"]
