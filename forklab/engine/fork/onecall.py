"""One-call forks of a run imported from a trace (SPEC §8 (a)).

An imported run's graph only describes its trace: nothing can re-execute it. What can be
redone is one model call whose whole request was captured (a *replayable* call, as the
``trace.imported`` event lists it): re-asked through forklab's providers with the recorded
request — messages, system instructions, tool definitions, params — and the fork's changes
of that call. The fork's log is the base's prefix before the call's node, the node's calls
before the point as recorded (label ``reused``), then the call asked (label ``changed``, or
``live`` for a null fork; ``reused`` when memoize serves an unchanged request), and the fork
ends there: ``run.forked`` says ``one_call``, the node completes and the run completes. The
trace's later calls are **not re-executed** — the diff lists them under
``path.not_reexecuted`` (its steps ``not_reached``), never gone or skipped by the change.

Rules (each refusal names what is possible instead):
- the point is a model call: ``{"before_call": KEY}``, or no ``at`` and changes with
  ``call`` (``one_call_only`` for a node point, a tool call, ``start``/``failure``);
- changes are ``model``, ``prompt``, ``temperature``, ``messages``, ``tools`` and
  ``rerun`` (asked again as it was, even with memoize) of that call (``one_call_only`` for
  any other kind, a change of another call or a whole node);
  ``tools`` removes tools the call was offered and adds tools offered by any call of the
  trace (imported tools have no registry, so only the trace's own definitions exist);
- the call must be replayable (``call_not_replayable`` names what is missing and the
  capture setting the trace's instrumentation needs);
- the provider is the call's (``gen_ai.provider.name`` / ``llm.provider``, aliases mapped
  to forklab's), or the one a ``model`` change names; one forklab lacks is
  ``unknown_provider``;
- what the trace did not say is not invented: a temperature the import stored as the API's
  default and a ``max_tokens`` it never saw are left unsent (``ChatRequest.unsent``; the
  vendor's default applies) and the call's ``agent.requested`` lists them under ``unsent``.

A one-call fork's prefix is stored as a copy (no ``prefix_ref``) and its node's earlier
calls and the request it asked are in its own log: a late span that rewrites the imported
run's log does not change what the fork shows.

Pure: no Django, no I/O beyond the run's providers when the runner asks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from forklab.engine.actions import AgentAnswer
from forklab.engine.asking import ask
from forklab.engine.calls import parse_call_key
from forklab.engine.errors import (
    CallNotReplayable,
    InvalidChange,
    OneCallOnly,
    UnknownProviderError,
)
from forklab.engine.events import (
    AgentRequested,
    AgentResponded,
    CallFailed,
    Event,
    NodeCompleted,
    NodeStarted,
    RunCompleted,
    ToolCalled,
    ToolReturned,
    TraceImported,
)
from forklab.engine.fork.changes import (
    Change,
    MessagesChange,
    ModelChange,
    PromptChange,
    RerunChange,
    TemperatureChange,
    ToolsChange,
    parse_changes,
)
from forklab.engine.fork.effective import apply_at
from forklab.engine.fork.estimate import Estimate
from forklab.engine.fork.memo import Recording
from forklab.engine.fork.percall import CallChanges
from forklab.engine.fork.points import ForkPoint
from forklab.engine.fork.resolve import call_point, parse_point
from forklab.engine.fork.tail import Policy
from forklab.engine.fork.wire import Budget
from forklab.engine.graph import AgentSpec, WorkflowNode
from forklab.engine.oracle import BudgetExceeded, NodeCall, NodeFailure
from forklab.engine.providers import ChatRequest, ToolDefinition
from forklab.engine.runner import Cancelled, Runner
from forklab.engine.state import RunState

if TYPE_CHECKING:
    from forklab.engine.fork.base import BaseRun
    from forklab.engine.fork.plan import ForkPlan

ALLOWED = (ModelChange, PromptChange, TemperatureChange, MessagesChange, ToolsChange,
           RerunChange)
"""The change kinds a one-call fork takes, each given the call it re-asks (``rerun``: ask
it again as it was, live even with memoize)."""

PROVIDER_ALIASES = {"openai": "openai", "azure.ai.openai": "openai", "az.ai.openai": "openai",
                    "azure_openai": "openai", "anthropic": "anthropic"}
"""Provider names traces use (GenAI ``gen_ai.provider.name`` / ``gen_ai.system``,
OpenInference ``llm.provider``) → forklab's provider; any other name is used as it is."""

_COPIED = (AgentRequested, AgentResponded, ToolCalled, ToolReturned, CallFailed)
_RELABELLED = (AgentResponded, ToolReturned, CallFailed)


def trace_imported(events: Sequence[Event]) -> TraceImported | None:
    """The ``trace.imported`` event of an imported run's log (its second), else None."""
    for event in events[:3]:
        if isinstance(event, TraceImported):
            return event
    return None


def imported_kind(base: BaseRun) -> Literal["one_call", "workflow"] | None:
    """How a fork of ``base`` runs when ``base`` came from a trace: ``one_call`` (this
    module) for the trace's own run; ``workflow`` for the workflow base a trace mapped to
    registered code became (``traces.as_workflow``, SPEC §8 (b)), forked like any workflow
    run. None: not imported — and not a one-call fork, whose own forks are refused here
    too."""
    if trace_imported(base.events) is not None:
        return ("workflow" if all(isinstance(n, WorkflowNode) for n in base.graph.nodes)
                else "one_call")
    if base.state.fork is not None and base.state.fork.one_call is not None:
        return "one_call"
    return None


def _possible(base: BaseRun) -> str:
    """What a fork of imported run ``base`` can be, with its replayable calls (a few)."""
    trace = trace_imported(base.events)
    calls = [str(c["call"]) for c in (trace.calls if trace else ())
             if c.get("kind") == "agent" and c.get("replayable")]
    listed = ", ".join(calls[:6]) + (" …" if len(calls) > 6 else "")
    return (f"a fork of imported run {base.run_id!r} re-asks one replayable model call "
            f"(here: {listed or 'none'}): "
            'at={"before_call": "NODE#N/turn:T"} (or changes with "call" and no at), with '
            "model, prompt, temperature, messages, tools or rerun changes of that call")


@dataclass(frozen=True)
class ReAsk:
    """What a one-call fork's runner does: the node execution it re-opens, the calls
    recorded before the point (event class and fields, copied as ``reused``), and the
    request it asks (the recorded one with the ``tools`` change applied; ``ask`` applies
    the model / prompt / temperature / messages changes, as in any fork)."""

    key: str
    part: str
    node: str
    occurrence: int
    iteration: int
    fingerprint: str
    prefix: tuple[tuple[type[Event], dict[str, Any]], ...]
    request: ChatRequest

    def call(self) -> NodeCall:
        return NodeCall(node=self.node, kind="agent", occurrence=self.occurrence,
                        iteration=self.iteration, fingerprint=self.fingerprint, reads={})


def _key(base: BaseRun, text: str) -> str:
    """The canonical key of call ``text`` in the base (an alias by provider id resolved);
    ``fork_point_not_found`` for a call the base never made."""
    point = call_point(base.index, text)
    if point.call is not None:
        return point.call
    address = parse_call_key(text)
    assert address is not None  # call_point read it
    return f"{point.node}#{point.occurrence}/{address.call}"  # the node's first call


def _call_key(base: BaseRun, at: Any, changes: Sequence[Change]) -> str:
    """The call key the request forks at, checked to be a point before a model call."""
    if isinstance(at, str):
        at = parse_point(at) if at not in ("start", "failure") else at
    if at is None:
        addressed = [str(a) for c in changes if (a := c.call_address()) is not None]
        if not addressed:
            raise OneCallOnly(f"no call to re-ask: {_possible(base)}",
                              run_id=base.run_id)
        at = {"before_call": addressed[0]}
    if not (isinstance(at, dict) and set(at) == {"before_call"}):
        raise OneCallOnly(f"fork point {at!r} is not a model call: {_possible(base)}",
                          run_id=base.run_id, at=at)
    key = _key(base, str(at["before_call"]))
    if not key.rsplit("/", 1)[-1].startswith("turn:"):
        raise OneCallOnly(f"call {key} is a tool call, which a trace's fork cannot re-run "
                          f"(its tool is the app's code): {_possible(base)}",
                          run_id=base.run_id)
    return key


def _check_changes(base: BaseRun, key: str, changes: Sequence[Change]) -> None:
    for item in changes:
        address = item.call_address()
        if not isinstance(item, ALLOWED) or address is None:
            raise OneCallOnly(f"{item.describe()}: not possible on a run imported from a "
                              f"trace; {_possible(base)}", run_id=base.run_id,
                              kind=item.kind)
        if _key(base, str(address)) != key:
            raise OneCallOnly(f"{item.describe()}: a one-call fork changes only the call it "
                              f"re-asks, {key!r}; fork {address} on its own (a sweep forks "
                              "one call with several changes)", run_id=base.run_id,
                              call=str(address))


def _check_replayable(trace: TraceImported, key: str) -> None:
    info = next((c for c in trace.calls if c.get("call") == key), None)
    if info is None or info.get("replayable"):
        return
    missing = ", ".join(info.get("missing") or ()) or "its content"
    hint = info.get("capture_hint") or "capture content in the traced app"
    raise CallNotReplayable(
        f"call {key!r} is inspect-only: the trace did not capture {missing}, so forklab "
        f"cannot re-ask it; {hint}, then send the trace again (calls whose content was "
        "captured can be forked)", call=key, missing=list(info.get("missing") or ()),
        capture_hint=hint)


def _recorded(base: BaseRun, node: str, occurrence: int, part: str
              ) -> tuple[list[Event], AgentRequested]:
    """The node execution's call events before the call, and the call's request."""
    before: list[Event] = []
    for event in base.events:
        if event.node != node or event.occurrence != occurrence:
            continue
        if isinstance(event, AgentRequested) and (event.call or "turn:1") == part:
            return before, event
        if isinstance(event, _COPIED):
            before.append(event)
    raise OneCallOnly(f"call {node}#{occurrence}/{part} has no recorded request")


def _request(asked: AgentRequested, trace: TraceImported, key: str) -> ChatRequest:
    """The recorded request, with what the trace did not say left unsent."""
    info = next((c for c in trace.calls if c.get("call") == key), {})
    unsent = set(info.get("defaults") or ())  # e.g. a temperature stored as the default
    if not {"max_tokens", "max_completion_tokens"} & set(asked.params):
        unsent.add("max_tokens")
    return ChatRequest(
        provider=asked.provider, model=asked.model, system_prompt=asked.system_prompt,
        temperature=asked.temperature, messages=tuple(asked.messages),
        params=dict(asked.params),
        tools=tuple(ToolDefinition(**t) for t in asked.tools or ()),
        tool_choice=asked.tool_choice, parallel_tool_calls=asked.parallel_tool_calls,
        response_format=asked.response_format, unsent=frozenset(unsent))


def _offered(base: BaseRun) -> dict[str, ToolDefinition]:
    """Every tool any call of the trace was offered, by name (the first definition)."""
    found: dict[str, ToolDefinition] = {}
    for event in base.events:
        if isinstance(event, AgentRequested):
            for tool in event.tools or ():
                found.setdefault(str(tool["name"]), ToolDefinition(**tool))
    return found


def _with_tools(request: ChatRequest, changes: Sequence[Change],
                offered: dict[str, ToolDefinition]) -> ChatRequest:
    for item in changes:
        if not isinstance(item, ToolsChange):
            continue
        names = [t.name for t in request.tools]
        unknown = [n for n in item.remove if n not in names]
        if unknown:
            raise InvalidChange(f"tools change of {item.call!r}: the call was not offered "
                                f"{unknown}; it was offered {names or 'no tools'}",
                                kind="tools", field="remove")
        missing = [n for n in item.add if n not in offered]
        if missing:
            raise InvalidChange(f"tools change of {item.call!r}: the trace offered no tool "
                                f"named {missing} in any call (a trace's fork can add only "
                                f"those: {sorted(offered) or 'none'})", kind="tools",
                                field="add")
        tools = [t for t in request.tools if t.name not in item.remove]
        tools += [offered[n] for n in item.add if n not in {t.name for t in tools}]
        choice = item.tool_choice if item.tool_choice is not None else (
            request.tool_choice if tools else None)
        request = dataclasses.replace(request, tools=tuple(tools), tool_choice=choice,
                                      parallel_tool_calls=request.parallel_tool_calls
                                      if tools else None)
    return request


def _provider(request: ChatRequest, names: Sequence[str], key: str) -> ChatRequest:
    """The request under the forklab provider its trace name maps to (a model change may
    have named one); ``unknown_provider`` when forklab has none of that name."""
    name = PROVIDER_ALIASES.get(request.provider.lower(), request.provider)
    if name not in names:
        raise UnknownProviderError(
            f"call {key!r} was made through provider {request.provider!r}, which forklab "
            f"cannot call (its providers: {', '.join(names)}); name one with a model change, "
            f'e.g. {{"kind": "model", "call": "{key}", "model": "{request.model}", '
            '"provider": "openai"}', provider=request.provider, call=key)
    return request if name == request.provider else dataclasses.replace(request, provider=name)


def re_ask(base: BaseRun, at: Any, changes: Sequence[Change]) -> tuple[ReAsk, ChatRequest]:
    """The one-call fork ``at`` with ``changes`` would make: what its runner does and the
    request it sends in the end (every change applied). Raises ``one_call_only``,
    ``call_not_replayable``, ``invalid_change``, ``unknown_provider``; calls nothing."""
    if trace_imported(base.events) is None:
        origin = base.state.fork
        raise OneCallOnly(
            f"run {base.run_id!r} is a one-call fork (of call {origin.one_call if origin else '?'}"
            f" of imported run {base.state.parent_run_id!r}); fork the imported run itself, "
            "with this fork's changes and yours", run_id=base.run_id)
    trace = trace_imported(base.events)
    assert trace is not None
    key = _call_key(base, at, changes)
    _check_changes(base, key, changes)
    _check_replayable(trace, key)
    node, rest = key.split("#", 1)
    occurrence, part = int(rest.split("/", 1)[0]), rest.split("/", 1)[1]
    before, asked = _recorded(base, node, occurrence, part)
    request = _with_tools(_request(asked, trace, key), changes, _offered(base))
    execution = next(ex for ex in base.state.executions
                     if ex.node == node and ex.occurrence == occurrence)
    prefix = tuple((type(e), _copied_fields(e)) for e in before)
    work = ReAsk(key=key, part=part, node=node, occurrence=occurrence,
                 iteration=execution.iteration, fingerprint=execution.fingerprint,
                 prefix=prefix, request=request)
    final = CallChanges.of(changes, Recording.of(base.state)).adjust(node, occurrence, part,
                                                                     request)
    _provider(final, base.env.providers.names(), key)
    return work, final


def _copied_fields(event: Event) -> dict[str, Any]:
    fields = event.payload()
    if isinstance(event, _RELABELLED):
        fields["label"] = "reused"  # the past, served from the log
    return fields


def plan_one_call(
    base: BaseRun, *, at: Any, change: Any, policy: Policy, budget: Budget,
    fold: Callable[[ForkPoint], Callable[[], RunState]],
) -> ForkPlan:
    """The ForkPlan of a one-call fork (see the module docstring); ``fold`` makes the lazy
    fold of the state at a point (shared across a sweep's variants). The estimate is one
    live call priced at the recorded usage (none when memoize serves an unchanged request).
    Budget checks are the caller's, as for every plan."""
    from forklab.engine.fork.plan import ForkPlan

    changes = parse_changes([] if change is None else change)
    work, final = re_ask(base, at, changes)
    point = call_point(base.index, work.key)
    if point.call is None:  # the node's first call: its point is the node's boundary
        point = dataclasses.replace(point, kind="before_call", call=work.key)
    application = apply_at(base, point, changes)
    recorded = Recording.of(base.state).agent_call(work.node, work.occurrence, work.part)
    rerun = any(isinstance(c, RerunChange) for c in changes)
    estimate = _estimate(base, final, recorded, memoize=policy.memoize and not rerun)
    estimate.events_reused = point.seq
    return ForkPlan(base=base, point=point, effective=point, changes=list(changes),
                    graph=base.graph, prefix=fold(point), new_input=application.new_input,
                    changed_inputs=set(), policy=policy, budget=budget,
                    memoize=policy.memoize, estimate=estimate, application=application,
                    warnings=[f"one-call fork: only {work.key} is asked again; the trace's "
                              "later calls are not re-executed"],
                    one_call=work.key)


def _estimate(base: BaseRun, final: ChatRequest, recorded: Any, *, memoize: bool) -> Estimate:
    if not isinstance(recorded, AgentAnswer):
        return Estimate(live_calls=1)
    if memoize and recorded.request_hash == final.request_hash:
        return Estimate()  # served from the recording
    tokens = recorded.input_tokens + recorded.output_tokens
    cost = base.env.prices.cost(final.model, recorded.input_tokens, recorded.output_tokens)
    return Estimate(live_calls=1, tokens=tokens, cost_usd=cost or 0.0,
                    unpriced_models=[final.model] if cost is None else [])


class OneCallRunner(Runner):
    """Runs a one-call fork's tail after its opening events: re-opens the node, copies its
    calls before the point, asks the call through the fork oracle (changes, budget, labels,
    memoize) and ends the node and the run. Resumable: a process that died inside the node
    leaves it interrupted (``Runner.resume``); it is re-opened and a call already answered
    is served back by the resume oracle."""

    def __init__(self, *args: Any, work: ReAsk, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.work = work

    def _drive(self) -> RunState:
        if self.state.finished:
            return self.state
        work = self.work
        call = work.call()
        self._envelope_emit(NodeStarted, call, kind="agent", fingerprint=work.fingerprint,
                            reads={})
        for cls, fields in work.prefix:  # fields hold ``call`` (the key): emit directly
            self.emit(cls, node=work.node, occurrence=work.occurrence,
                      iteration=work.iteration, **fields)
        agent = AgentSpec(provider=work.request.provider, model=work.request.model)
        try:
            ask(self.context(call, frozenset()), agent, list(work.request.messages),
                request=work.request, call=work.part)
        except (NodeFailure, BudgetExceeded, Cancelled) as error:
            self._finish(call, None, error)
            return self.state
        self._settle(call)
        self._envelope_emit(NodeCompleted, call, next=[], waiting=[],
                            duration_ms=self._elapsed_ms())
        self.emit(RunCompleted)
        return self.state


def one_call_runner(base: BaseRun, key: str, changes: Sequence[Change]
                    ) -> Callable[..., Runner]:
    """The runner class of a one-call fork at ``key`` (bound to its work), for
    ``run_plan`` and ``fork_runner`` to build as they build any fork's runner."""
    work, _ = re_ask(base, {"before_call": key}, changes)

    def build(*args: Any, **kwargs: Any) -> Runner:
        return OneCallRunner(*args, work=work, **kwargs)

    return build


__all__ = ["ALLOWED", "CallNotReplayable", "OneCallOnly", "OneCallRunner", "ReAsk",
           "imported_kind", "one_call_runner", "plan_one_call", "re_ask", "trace_imported"]
