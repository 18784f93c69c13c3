"""Oracles: the seam where a run's actions are satisfied.

The runner never calls a provider, a tool, a human or a child graph directly; it asks its
oracle, which answers with the result and the provenance label to record. The live oracle
does the real thing (label ``live``). Resumed runs and fork tails wrap it to serve recorded
results, substitute values, enforce side-effect policy and budgets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from forklab.engine.actions import AgentAnswer, HumanDecision, ToolCall, ToolResult
from forklab.engine.canonical import canonical_json, fingerprint
from forklab.engine.errors import (
    ForklabError,
    InvalidInput,
    ProviderError,
    ProviderTimeout,
    UnexpectedToolCalls,
)
from forklab.engine.graph import ApprovalNode, RouterNode, SubgraphNode, ToolNode
from forklab.engine.inputs import check_json_value
from forklab.engine.providers import ChatRequest
from forklab.engine.providers.base import ToolCallRequest
from forklab.engine.redaction import contains_placeholder
from forklab.engine.state import Execution
from forklab.engine.status import CallLabel, RunStatus
from forklab.engine.tools import ToolContext


@dataclass(frozen=True, slots=True)
class NodeCall:
    """The node execution an oracle is asked about."""

    node: str
    kind: str
    occurrence: int
    iteration: int
    fingerprint: str
    reads: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RecordedTool:
    """A tool result served from a recording instead of a real call.

    ``result`` is the result as the log recorded it — redacted (see ``engine.redaction``) —
    and ``writes`` the memory writes the recorded execution made from the real result. The
    node writes ``writes``, never values re-derived from ``result``, so serving a recording
    cannot put a redaction placeholder into memory.
    """

    result: Any
    writes: dict[str, Any]

    @classmethod
    def of(cls, execution: Execution, action: ToolResult) -> Any:
        """Serve ``action`` (a tool result of ``execution``) as the recording holds it.

        A failed execution made no writes: its plain result is served, so the node fails
        again the same way (redaction keeps a value's shape).
        """
        if execution.status == "failed":
            return action.result
        return cls(result=action.result, writes=dict(execution.writes))


@dataclass(frozen=True, slots=True)
class Served:
    """A model answer with its label and (for recorded answers) its recorded cost.

    ``tool_calls``: the calls the reply asks for, ``{id, name, arguments}`` each."""

    text: str
    input_tokens: int
    output_tokens: int
    latency_ms: float
    label: CallLabel
    cost_usd: float | None = None
    recorded: bool = False
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str | None = None
    attempts: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of_record(cls, action: AgentAnswer, label: CallLabel = "reused") -> Served:
        """A recorded answer served again: its text, tool calls and recorded cost."""
        return cls(text=action.text, input_tokens=action.input_tokens,
                   output_tokens=action.output_tokens, latency_ms=0.0, label=label,
                   cost_usd=action.cost_usd, recorded=True,
                   tool_calls=tuple(action.tool_calls or ()),
                   finish_reason=action.finish_reason)


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call a model asked for, as the tool loop makes it (SPEC §6.2).

    ``call`` is its key within the execution (``turn:2/tool:1``), ``call_id`` the provider's
    id; ``invoke(args, ctx)`` runs the registered callable (``engine.toolbox``)."""

    call: str
    call_id: str
    name: str
    fn: str
    effect: str
    trusted: bool
    args: dict[str, Any]
    args_hash: str
    invoke: Callable[[dict[str, Any], ToolContext], Any]

    approval: bool = False

    @property
    def inputs(self) -> dict[str, Any]:
        """What the side-effect guard lists for this call when it blocks it (and what its
        gate shows a human)."""
        return {"tool": self.name, "call": self.call, "args": self.args}

    @property
    def gate_prompt(self) -> str:
        return f"Allow the call of tool {self.name!r} with these arguments?"


@dataclass(frozen=True, slots=True)
class HumanAnswer:
    decision: str  # approved | rejected | edited
    data: Any = None
    memory_updates: dict[str, Any] | None = None
    label: CallLabel = "live"
    answered_by: str = ""
    # re-served from a log (strict replay, forkcheck): applied as it was recorded, never
    # refused by rules newer than the recording (forklab.engine.answers)
    recorded: bool = False


@dataclass(frozen=True, slots=True)
class ChildResult:
    """A child run's result: its final memory, which of its keys are tainted, its totals and
    the labels of the calls it made (a fork labels the subgraph call from them)."""

    child_run_id: str
    status: RunStatus
    output: dict[str, Any]
    label: CallLabel
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    tainted: tuple[str, ...] = ()
    call_labels: tuple[CallLabel, ...] = ()


class NodeFailure(Exception):
    """A node failed (tool raised, provider errored): recorded as ``node.failed``.

    Raised by an oracle's ``agent``/``tool``, it is a call that failed: the node records it
    (``call.failed``, listed in ``calls``) with ``label`` — ``live`` for a call really made,
    what a fork decided for its own, ``reused`` for a recorded failure served again.
    ``detail`` adds structured fields to the recorded error (JSON values, beside ``type``
    and ``message``; none by default, so errors without it are recorded as they always were).
    """

    def __init__(self, error_type: str, message: str, *, label: CallLabel = "live",
                 detail: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.error: dict[str, Any] = {"type": error_type, "message": message, **(detail or {})}
        self.label: CallLabel = label


def recorded_failure(error: Mapping[str, Any], label: CallLabel = "reused") -> NodeFailure:
    """The failure a recorded error (a ``call.failed`` error) describes — the same type,
    message and detail (a vendor's status, its attempts): served again by a fork
    (``reused``), or failing the node the call was made in."""
    detail = {k: v for k, v in error.items() if k not in ("type", "message")}
    return NodeFailure(str(error.get("type")), str(error.get("message")), label=label,
                       detail=detail)


def tool_writes(node: ToolNode, result: Any) -> dict[str, Any]:
    """The memory writes a tool node makes from its tool's ``result`` (a mapping of its
    ``writes`` keys, or the one value of a single-key node); an oracle re-derives them to
    check a recording, the node handler to write them."""
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


class Paused(Exception):
    """Internal: the node is waiting for a human; the run stops with status ``paused``."""


class Blocked(Exception):
    """The side-effect guard (or a budget) refused to run this action."""

    def __init__(self, reason: str, inputs: dict[str, Any], code: str = "write_not_allowed"):
        super().__init__(reason)
        self.reason = reason
        self.inputs = inputs
        self.code = code


class BudgetExceeded(Exception):
    """A fork's live-call or cost budget is spent: the tail stops (``live_budget_exceeded``,
    or ``unpriced_model`` for a call whose cost a cost budget cannot bound)."""

    def __init__(self, message: str, *, code: str = "live_budget_exceeded") -> None:
        super().__init__(message)
        self.code = code


class Oracle(Protocol):
    """``overlaps_calls``: whether answers may take time (real calls), so the runner runs
    independent nodes at once (``engine.scheduler``); an oracle with a budget also offers
    ``worst_case``/``admits``/``settle`` (see ``ForkOracle``)."""

    captures_reflections: bool
    overlaps_calls: bool

    def output(self, call: NodeCall) -> dict[str, Any] | None: ...
    def memo(self, call: NodeCall) -> Execution | None: ...
    def adjust(self, call: NodeCall, key: str, request: ChatRequest) -> ChatRequest:
        """The request a model call ``key`` really sends (a fork's per-call changes)."""
    def agent(self, call: NodeCall, request: ChatRequest, role: str | None,
              index: int | None, key: str | None = None) -> Served: ...
    def tool(self, call: NodeCall, node: ToolNode, args: dict[str, Any],
             ctx: ToolContext) -> tuple[Any, CallLabel]: ...
    def tool_call(self, call: NodeCall, use: ToolUse,
                  ctx: ToolContext) -> tuple[Any, CallLabel]:
        """A tool the model chose: its result (JSON) and label; raises ``NodeFailure``
        when the tool raised (the loop answers the model with the error)."""
    def human_call(self, call: NodeCall, use: ToolUse) -> HumanAnswer | None:
        """The answer to an ``approval: true`` tool's gate for ``use`` (None: pause)."""
    def route(self, call: NodeCall, node: RouterNode) -> str | None: ...
    def human(self, call: NodeCall, node: ApprovalNode) -> HumanAnswer | None: ...
    def subgraph(self, call: NodeCall, node: SubgraphNode, child_input: dict[str, Any],
                 run_child: Callable[[], ChildResult]) -> ChildResult: ...
    def child(self, call: NodeCall, node: SubgraphNode) -> Oracle:
        """The oracle a child run started by ``node`` executes under."""


def ensure_json(value: Any, what: str) -> Any:
    """Round-trip through JSON so recorded values are plain data; fails the node otherwise.

    The result must also pass the edge checks (``forklab.engine.inputs``): a tool that
    returns NaN, a NUL character, a lone surrogate or a value nested too deep fails its node
    (``invalid_input``) instead of reaching the store, which would refuse the append.
    """
    try:
        plain = json.loads(json.dumps(value))
    except (TypeError, ValueError, RecursionError) as exc:
        raise NodeFailure("non_json_result", f"{what} is not JSON-serializable: {exc}") from None
    try:
        check_json_value(plain, where=what)
    except InvalidInput as exc:
        raise NodeFailure(exc.code, exc.message) from None
    return plain


def _unexpected_tool_calls(request: ChatRequest,
                           calls: tuple[ToolCallRequest, ...]) -> UnexpectedToolCalls:
    asked = ", ".join(f"{c.name}({canonical_json(c.arguments)[:80]})" for c in calls)
    return UnexpectedToolCalls(
        f"model {request.model!r} asked for tool calls ({asked}) but its agent was offered no "
        "tools; the reply is not recorded as an empty answer — declare the tools the agent "
        "may use (agent `tools:`) or stop offering them in its params", tool_calls=asked)


class LiveOracle:
    """Does everything for real: providers, tools, the ``hitl`` callback, child runs."""

    captures_reflections = False
    overlaps_calls = True  # its calls wait on the world: worth running nodes at once

    def __init__(self, env: Any, hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None = None):
        self.env = env
        self.hitl = hitl

    def output(self, call: NodeCall) -> dict[str, Any] | None:
        return None

    def memo(self, call: NodeCall) -> Execution | None:
        return None

    def adjust(self, call: NodeCall, key: str, request: ChatRequest) -> ChatRequest:
        return request

    def agent(self, call: NodeCall, request: ChatRequest, role: str | None = None,
              index: int | None = None, key: str | None = None) -> Served:
        try:
            response = self.env.providers.get(request.provider).complete(request)
            check_json_value(response.text, where=f"the reply of model {request.model!r}")
            if response.tool_calls and not request.tools:
                raise _unexpected_tool_calls(request, response.tool_calls)
            tool_calls = tuple(ensure_json(
                {"id": c.id, "name": c.name, "arguments": c.arguments},
                f"a tool call of model {request.model!r}") for c in response.tool_calls)
        except (ProviderError, ProviderTimeout) as exc:  # its status, message and attempts
            raise NodeFailure(exc.code, exc.message, detail=exc.context) from None
        except ForklabError as exc:
            raise NodeFailure(exc.code, exc.message) from None
        attempts = tuple(a.to_wire() for a in response.attempts)
        return Served(text=response.text, input_tokens=response.input_tokens,
                      output_tokens=response.output_tokens, latency_ms=response.latency_ms,
                      label="live", tool_calls=tool_calls,
                      finish_reason=response.finish_reason, attempts=attempts)

    def tool_call(self, call: NodeCall, use: ToolUse,
                  ctx: ToolContext) -> tuple[Any, CallLabel]:
        try:
            result = use.invoke(dict(use.args), ctx)
        except Exception as exc:  # the tool's own failure is data: answered to the model
            raise NodeFailure(type(exc).__name__, str(exc)) from None
        return ensure_json(result, f"tool {use.name!r} result"), "live"

    def tool(self, call: NodeCall, node: ToolNode, args: dict[str, Any],
             ctx: ToolContext) -> tuple[Any, CallLabel]:
        try:
            fn = self.env.tools.resolve(node.tool)
        except ForklabError as exc:
            raise NodeFailure(exc.code, exc.message) from None
        try:
            result = fn(dict(args), ctx)
        except Exception as exc:  # a tool's own failure is data: node.failed
            raise NodeFailure(type(exc).__name__, str(exc)) from None
        return ensure_json(result, f"tool {node.tool!r} result"), "live"

    def route(self, call: NodeCall, node: RouterNode) -> str | None:
        return None

    def human(self, call: NodeCall, node: ApprovalNode) -> HumanAnswer | None:
        if self.hitl is None:
            return None
        return self.hitl({"node": call.node, "prompt": node.prompt, "context": call.reads})

    def human_call(self, call: NodeCall, use: ToolUse) -> HumanAnswer | None:
        if self.hitl is None:
            return None
        return self.hitl({"node": call.node, "call": use.call, "prompt": use.gate_prompt,
                          "context": use.inputs})

    def subgraph(self, call: NodeCall, node: SubgraphNode, child_input: dict[str, Any],
                 run_child: Callable[[], ChildResult]) -> ChildResult:
        return run_child()

    def child(self, call: NodeCall, node: SubgraphNode) -> LiveOracle:
        """A child run is live too (without ``hitl``: a gate inside a child pauses it)."""
        return LiveOracle(self.env)


class ResumeOracle:
    """Serves the recorded results of a node interrupted by a crash, then goes live.

    Matching is by node, occurrence and request hash (agents) or args hash (tools), so a
    resumed node pays for nothing the interrupted attempt already recorded — and a write
    tool whose result was recorded is not executed twice. Each recording is served once, in
    recorded order: identical requests (three voters asked the same question) get one
    recorded answer each, and the calls the attempt never made go live.
    """

    def __init__(self, inner: Any, interrupted: list[Execution],
                 answers: dict[tuple[str, int, str], HumanAnswer] | None = None) -> None:
        self.inner = inner
        self.captures_reflections = inner.captures_reflections
        # a tool call's gate answered while the run was paused there (``Runner.answer``)
        self._answers = dict(answers or {})
        self._agents: dict[tuple[str, int, str], list[AgentAnswer]] = {}
        self._tools: dict[tuple[str, int, str], list[tuple[Any, dict[str, Any]]]] = {}
        self._chosen: dict[tuple[str, int, str], tuple[str, ToolResult]] = {}
        for execution in interrupted:
            pending_args: str | None = None
            args_of: dict[str, str] = {}
            for action in execution.actions:
                key = (execution.node, execution.occurrence)
                if isinstance(action, AgentAnswer):
                    self._agents.setdefault((*key, action.request_hash), []).append(action)
                elif isinstance(action, ToolCall) and action.call is not None:
                    args_of[action.call] = action.args_hash
                elif isinstance(action, ToolCall):
                    pending_args = action.args_hash
                elif isinstance(action, ToolResult) and action.call is not None:
                    self._chosen[(*key, action.call)] = (args_of.get(action.call, ""), action)
                elif isinstance(action, HumanDecision) and action.call is not None:
                    self._answers.setdefault((*key, action.call), HumanAnswer(
                        decision=action.decision, data=action.data, label="reused",
                        recorded=True))
                elif isinstance(action, ToolResult) and pending_args is not None:
                    self._tools.setdefault((*key, pending_args), []).append(
                        (action.result, execution.writes))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def agent(self, call: NodeCall, request: ChatRequest, role: str | None = None,
              index: int | None = None, key: str | None = None) -> Served:
        recorded = self._agents.get((call.node, call.occurrence, request.request_hash))
        if not recorded:
            return self.inner.agent(  # type: ignore[no-any-return]
                call, request, role, index, key)
        return Served.of_record(recorded.pop(0))

    def tool_call(self, call: NodeCall, use: ToolUse,
                  ctx: ToolContext) -> tuple[Any, CallLabel]:
        """A chosen tool whose result the interrupted attempt recorded (same call key and
        arguments) is served, never run twice — a write tool included."""
        found = self._chosen.pop((call.node, call.occurrence, use.call), None)
        if found is not None and found[0] == use.args_hash:
            return found[1].result, "reused"
        return self.inner.tool_call(call, use, ctx)  # type: ignore[no-any-return]

    def human_call(self, call: NodeCall, use: ToolUse) -> HumanAnswer | None:
        answer = self._answers.pop((call.node, call.occurrence, use.call), None)
        if answer is not None:
            return answer
        return self.inner.human_call(call, use)  # type: ignore[no-any-return]

    def tool(self, call: NodeCall, node: ToolNode, args: dict[str, Any],
             ctx: ToolContext) -> tuple[Any, CallLabel]:
        recorded = self._tools.get((call.node, call.occurrence, fingerprint(args)))
        if not recorded:
            return self.inner.tool(call, node, args, ctx)  # type: ignore[no-any-return]
        result, writes = recorded.pop(0)
        if not contains_placeholder(result):
            return result, "reused"  # the writes follow from the result exactly
        if set(writes) == set(tool_writes(node, result)):
            return RecordedTool(result=result, writes=dict(writes)), "reused"
        if node.effect == "read":  # nothing outside changes: run it again for the real value
            return self.inner.tool(call, node, args, ctx)  # type: ignore[no-any-return]
        raise NodeFailure("recording_incomplete", (
            f"write tool {node.id!r} ran before the process stopped, but its recorded result "
            "was redacted and the stop lost some of its memory writes; it is not run twice — "
            "fork the run before this node to decide what it should have written"))
