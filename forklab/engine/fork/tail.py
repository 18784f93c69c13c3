"""The fork oracle: how a fork's tail is served (SPEC §3.4).

Decides, for every action of the tail, whether it is substituted by a change (``simulated``),
served from the base run's recording (``reused``), executed for real (``live`` / ``changed``)
or refused (the side-effect guard, budgets). It wraps the live oracle, so everything that
does run for real goes through the same code as a primary run.

Labels (a call that runs):
- ``changed`` when its node, role or instance is the target of a config-type change of this
  fork, or when its request (its args, for a tool) differs from the recorded call of the same
  node execution, role and instance;
- ``live`` when it matches the recording (memoize off) or there is no recording to compare;
- with memoize on, a call whose request equals the recorded one is served from it
  (``reused``) even inside a node that executes.

Side effects (write tools, subgraphs): policy ``replay`` serves the recorded result of a
finished base execution with the same fingerprint (a recorded failure fails again) and
blocks anything else; ``block`` blocks every one; ``allow`` runs the named ones for real.
A subgraph that runs for real runs under a child fork oracle: same policy, same memoize, the
same :class:`~forklab.engine.fork.spend.Spend`, reflection writes captured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from forklab.engine.actions import AgentAnswer, CallFailure, ChildOutcome, ToolResult
from forklab.engine.calls import turn_call
from forklab.engine.canonical import fingerprint
from forklab.engine.captured import differing_parts, is_captured, request_matches
from forklab.engine.fork.apply import Target, config_targets
from forklab.engine.fork.changes import (
    Change,
    HumanResponseChange,
    OutputChange,
    RouteChange,
    ToolChange,
)
from forklab.engine.fork.memo import Recording, SharedMemo
from forklab.engine.fork.percall import CallChanges, PrefixCalls, last_applying
from forklab.engine.fork.points import ForkPoint
from forklab.engine.fork.spend import Spend, worst_case, worst_case_usd
from forklab.engine.fork.wire import Budget, Policy
from forklab.engine.graph import ApprovalNode, GraphSpec, RouterNode, SubgraphNode, ToolNode
from forklab.engine.oracle import (
    Blocked,
    ChildResult,
    HumanAnswer,
    LiveOracle,
    NodeCall,
    NodeFailure,
    RecordedTool,
    Served,
    ToolUse,
    recorded_failure,
)
from forklab.engine.providers import ChatRequest, PriceTable
from forklab.engine.requests_diff import (
    as_recorded,
    described,
    recorded_request,
    recorded_tool_call,
    request_difference,
    tool_call_difference,
)
from forklab.engine.state import Execution
from forklab.engine.status import CallLabel
from forklab.engine.tools import ToolContext

__all__ = ["Budget", "ForkOracle", "Policy", "Recording", "SharedMemo", "Spend"]


def _reused_result[R: (ToolResult, ChildOutcome)](ex: Execution, kind: type[R]) -> R:
    """The recorded result record of ``ex`` (a tool's or a child run's), or raise its
    recorded failure as a reused one."""
    for action in ex.actions:
        if isinstance(action, kind):
            return action
    failed = next((a.error for a in ex.actions if isinstance(a, CallFailure)), None)
    error = failed or ex.error or {"type": "failed", "message": "recorded failure"}
    raise NodeFailure(str(error.get("type")), str(error.get("message")), label="reused")


def _child_result(action: ChildOutcome, label: CallLabel) -> ChildResult:
    return ChildResult(child_run_id=action.child_run_id, status=action.status,
                       output=action.output, label=label, cost_usd=action.cost_usd,
                       input_tokens=action.input_tokens, output_tokens=action.output_tokens,
                       tainted=action.tainted)


class ForkOracle:
    """Serves a fork's tail: changes, recordings, the side-effect guard and budgets.

    ``changes`` are every change active in the tail (the lineage's and this fork's; later
    ones win); ``targets`` are this fork's config-type targets (their calls are ``changed``).
    """

    captures_reflections = True

    def __init__(self, live: LiveOracle, *, recording: Recording, changes: Sequence[Change],
                 policy: Policy, spend: Spend, prices: PriceTable, memoize: bool,
                 targets: Sequence[Target] | None = None,
                 shared_memo: SharedMemo | None = None,
                 hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None = None,
                 routes_used: Sequence[str] = (), graph: GraphSpec | None = None,
                 point: ForkPoint | None = None) -> None:
        self.live = live
        self.recording = recording
        self.policy = policy
        self.spend = spend
        self.prices = prices
        self.memoize = memoize
        self.shared_memo = shared_memo
        self.hitl = hitl
        self.targets = list(config_targets(changes) if targets is None else targets)
        self.outputs = [c for c in changes if isinstance(c, OutputChange)]
        self.tools = [c for c in changes if isinstance(c, ToolChange)]
        self.routes = {c.source: c for c in changes if isinstance(c, RouteChange)}
        self.routes_used: set[str] = set(routes_used)
        self.humans = [c for c in changes if isinstance(c, HumanResponseChange)]
        self.calls = CallChanges.of(changes, recording)
        self.prefix = PrefixCalls.of(point, recording)
        self.graph = graph  # the tail's graph: a sibling's execution is checked against it
        # executions served from a sibling (a sweep) whose call this fork would have paid:
        # the call, what it would have cost and its worst case, counted when settled
        self._from_siblings: dict[int, tuple[NodeCall, float | None, float]] = {}

    # -- concurrency (engine.scheduler) -----------------------------------------------------
    overlaps_calls = True

    def worst_case(self, graph: GraphSpec, node: Any,
                   call: NodeCall | None) -> tuple[int | None, float | None]:
        """Most live calls and USD one execution of ``node`` can spend (None: unbounded or
        not yet known); ``call`` is the execution when its read slice is final.

        Only the scheduler asks, to reserve it against the budget before starting a node
        (:meth:`admits`); a budget that is not enforced admits anything, so nothing is
        reserved and the figure is not worked out — (0, 0.0) — which for a join of 1,000
        workers is a render of its 1,000-key prompt."""
        if not self.spend.enforce or (call is not None and self.output(call) is not None):
            return 0, 0.0
        if call is not None and self.memo(call) is not None:
            return self.served_worst(call)
        return worst_case(graph, node, call, self.prices)

    def served_worst(self, call: NodeCall) -> tuple[int, float]:
        """What a node served whole now (:meth:`memo`) reserves against the budget: nothing,
        unless a sibling's execution is served in place of a call this fork would have paid
        — then that call's worst case, as if it were made."""
        held = self._from_siblings.get(id(call))
        return (1, held[2]) if held is not None else (0, 0.0)

    def admits(self, calls: int | None, usd: float | None) -> bool:
        return self.spend.admits(calls, usd)

    def settle(self, call: NodeCall, *, kept: bool) -> None:
        held = self._from_siblings.pop(id(call), None)
        if held is not None and kept:
            self.spend.after(held[1], call)  # the budget counts it as if it had been made
        self.spend.settle(call, kept=kept)

    # -- node level ------------------------------------------------------------------------
    def output(self, call: NodeCall) -> dict[str, Any] | None:
        found = last_applying(self.outputs, call.node, call.occurrence)
        return None if found is None else found.memory

    def memo(self, call: NodeCall) -> Execution | None:
        if (not self.memoize or call.node in self.routes
                or last_applying(self.tools, call.node, call.occurrence) is not None
                or self.calls.touch(call.node, call.occurrence)):
            return None  # a change supplies part of it: it must execute to apply it
        if call.kind == "workflow":  # its code is not in its fingerprint: a fork re-executes
            return None  # it (SPEC §7), its calls served one by one when their requests match
        if call.kind == "approval" and (
                last_applying(self.humans, call.node, call.occurrence) is not None
                or self.hitl is not None):
            return None
        if call.kind in ("tool", "subgraph") and self.policy.blocks_all:
            return None
        found = self.recording.memo(call.fingerprint)
        if found is None and self.shared_memo is not None:
            found = self._from_sibling(call)
        return found

    def _from_sibling(self, call: NodeCall) -> Execution | None:
        """A sweep sibling's execution of this fingerprint, when serving it leaves the
        variant's outcome what it would be alone.

        The sibling paid for the calls this fork would make; serving them is free, but the
        budget is checked and spent as if they were made (:meth:`settle`), so a variant stops
        at its budget exactly where it would alone. That is decided exactly for an execution
        with at most one paid call (one agent, or a read tool); any other is served only
        when no budget applies to it, else the node executes."""
        ex = self.shared_memo.get(call.fingerprint) if self.shared_memo is not None else None
        self._from_siblings.pop(id(call), None)
        if ex is None:
            return None
        paid = [a for a in ex.actions if isinstance(a, (AgentAnswer, ToolResult, CallFailure,
                                                         ChildOutcome))
                and a.label in ("live", "changed")]
        cap = self.spend.budget.max_cost_usd
        if not paid or (not self.spend.enforce and cap is None):
            return ex
        agents = [a for a in paid if isinstance(a, AgentAnswer)
                  or (isinstance(a, CallFailure) and a.kind == "agent")]
        if cap is not None and any(self.prices.price(a.model or "") is None for a in agents):
            return None  # alone, the call is refused as unpriced under the cost budget
        if not self.spend.enforce:
            return ex
        return ex if self._admit_sibling(call, paid[0]) and len(paid) == 1 else None

    def _admit_sibling(self, call: NodeCall, action: Any) -> bool:
        """Whether this fork's budget admits the one call ``action`` stands for — the check
        :meth:`Spend.before` would make at the head — and if so, hold it for :meth:`settle`."""
        if isinstance(action, ChildOutcome) or self.graph is None:
            return False
        worst: float | None = 0.0
        cost: float | None = 0.0
        if isinstance(action, AgentAnswer) or (isinstance(action, CallFailure)
                                               and action.kind == "agent"):
            node = self.graph.node(call.node)
            calls, worst = worst_case(self.graph, node, call, self.prices)
            if calls != 1 or worst is None:
                return False  # a multi-role node: its calls' worst cases are not known
            if isinstance(action, AgentAnswer):
                cost = self.prices.cost(action.model, action.input_tokens,
                                        action.output_tokens)
        if worst is None:
            return False
        limit, cap = self.spend.budget.max_live_calls, self.spend.budget.max_cost_usd
        if limit is not None and self.spend.live_calls + 1 > limit:
            return False
        if cap is not None and self.spend.incurred_usd + worst > cap:
            return False
        self._from_siblings[id(call)] = (call, cost, worst)
        return True

    def child(self, call: NodeCall, node: SubgraphNode) -> ForkOracle:
        """The oracle of a child run started in the tail: the guard, memo and budget of this
        fork, the recording of the child run the base started at this execution."""
        return ForkOracle(self.live.child(call, node),
                          recording=self.recording.child(call.node, call.occurrence),
                          changes=(), targets=(), policy=self.policy, spend=self.spend,
                          prices=self.prices, memoize=self.memoize)

    # -- labels ----------------------------------------------------------------------------
    def _targeted(self, node: str, role: str | None, index: int | None) -> bool:
        return any(t.covers(node, role, index) for t in self.targets)

    def _label(self, node: str, role: str | None, index: int | None, recorded: str | None,
               same: bool) -> CallLabel:
        """``changed`` for a targeted call or one whose request (args) differs from the
        recorded call's; else ``live``."""
        if self._targeted(node, role, index) or (recorded is not None and not same):
            return "changed"
        return "live"

    # -- actions ---------------------------------------------------------------------------
    def adjust(self, call: NodeCall, key: str, request: ChatRequest) -> ChatRequest:
        """The request with this call's per-call model / prompt / temperature changes."""
        return self.calls.adjust(call.node, call.occurrence, key, request)

    def agent(self, call: NodeCall, request: ChatRequest, role: str | None,
              index: int | None, key: str | None = None) -> Served:
        key = key or turn_call(1, role, index)
        node, occurrence = call.node, call.occurrence
        reply = self.calls.reply(node, occurrence, key)
        if reply is not None:
            return Served(text=reply.text, input_tokens=0, output_tokens=0, latency_ms=0.0,
                          label="simulated", tool_calls=reply.served_tool_calls(),
                          finish_reason="tool_calls" if reply.tool_calls else "stop")
        recorded = self.recording.agent_call(node, occurrence, key)
        recorded_hash = None if recorded is None else recorded.request_hash
        # a call recorded from a trace matches on what the trace captured (engine.captured)
        same = request_matches(recorded_hash, request)
        rerun = self.calls.reruns(node, occurrence, key)
        if self.prefix.holds(node, occurrence, key) and not rerun:
            self._check_prefix(call, key, recorded, same, request)
            assert recorded is not None
            return self._reuse_agent(recorded)
        if self.memoize and not rerun and recorded is not None and same:
            return self._reuse_agent(recorded)
        label = self._label(node, role, index, recorded_hash, same)
        if self.calls.adjusts(node, occurrence, key):
            label = "changed"
        self.spend.before(call, call.node, worst_case_usd(request, self.prices), request.model)
        try:
            served = self.live.agent(call, request, role, index, key)
        except NodeFailure as failure:
            self.spend.after(0.0, call)
            failure.label = label
            raise
        self.spend.after(self.prices.cost(request.model, served.input_tokens,
                                          served.output_tokens), call)
        return replace(served, label=label)

    def _check_prefix(self, call: NodeCall, key: str, recorded: AgentAnswer | CallFailure | None,
                      same: bool,
                      request: ChatRequest) -> None:
        """A call before a call-level fork point is the past: served as recorded. A change
        of the fork may have altered its request (a prompt, a memory key the node read) —
        the calls from the point on see the change, the ones before it happened as they
        did. Only a call the recording does not hold cannot be served (``prefix_diverged``);
        and a workflow node, whose requests its own code makes, must make the same ones —
        compared on what a trace captured when the recording came from one. The error then
        names what differs (worked out only then: a match is a hash comparison) and carries
        it as ``differences``."""
        where = f"call {call.node}#{call.occurrence}/{key} comes before the fork point but "
        if recorded is None:
            raise NodeFailure("prefix_diverged", (
                where + "the base recorded no such call; the code or graph no longer makes "
                "the recorded calls — fork at the node instead"), label="reused")
        if same or call.kind != "workflow":
            return
        address = f"{call.node}#{call.occurrence}/{key}"
        if is_captured(recorded.request_hash):
            parts = differing_parts(recorded.request_hash, request)
            raise NodeFailure("prefix_diverged", (
                where + f"its request differs from the one the trace captured "
                f"({', '.join(parts)}): the code changed since the trace was recorded, or "
                "does not reproduce"), label="reused",
                detail={"call": address, "differences": [{"part": p} for p in parts]})
        was = recorded_request(self.recording.logs, call.node, call.occurrence,
                               str(recorded.request_hash))
        found = ([] if was is None else
                 request_difference(was, as_recorded(request, self.live.env.redactor)))
        what = described(found) or (
            "its messages, tools and settings are as recorded, so a field the log does "
            "not keep (max_tokens) differs" if was is not None else
            "its messages, tools or settings differ (the recorded request is not at hand)")
        raise NodeFailure("prefix_diverged", (
            where + f"now sends a different request than the recording — {what}: the "
            "code is not deterministic, or changed"), label="reused",
            detail={"call": address, "differences": [d.to_wire() for d in found]})

    @staticmethod
    def _reuse_agent(action: AgentAnswer | CallFailure) -> Served:
        if isinstance(action, CallFailure):
            raise recorded_failure(action.error)  # with its detail: a vendor's status
        return Served.of_record(action)

    def tool_call(self, call: NodeCall, use: ToolUse,
                  ctx: ToolContext) -> tuple[Any, CallLabel]:
        """A tool the model chose: a write obeys the guard (served when the base's lineage
        made that call with these arguments, else blocked, unless allowed); with memoize a
        call whose arguments equal the base's same call is served; else it runs."""
        node, occurrence = call.node, call.occurrence
        supplied = self.calls.result(node, occurrence, use.call)
        if supplied is not None:
            return supplied.result, "simulated"
        name, recorded_hash, outcome = self.recording.chosen_tool(node, occurrence, use.call)
        same = name == use.name and recorded_hash == use.args_hash
        rerun = (self.calls.reruns(node, occurrence, use.call)
                 or self.calls.within(node, occurrence, use.call))
        if self.prefix.holds(node, occurrence, use.call) and not rerun:
            if outcome is None or not same:
                was = recorded_tool_call(self.recording.by_occurrence.get((node, occurrence)),
                                         use.call)
                found = [] if outcome is None else tool_call_difference(
                    name, None if was is None else was.args, use.name,
                    self.live.env.redactor.redact(use.args))
                raise NodeFailure("prefix_diverged", (
                    f"call {node}#{occurrence}/{use.call} comes before the fork point but "
                    + ("the base recorded no result for it" if outcome is None else
                       f"now calls {use.name!r} otherwise than the recording — "
                       + (described(found) or "its arguments differ"))
                    + "; fork at the node instead"), label="reused",
                    detail={"call": f"{node}#{occurrence}/{use.call}",
                            "differences": [d.to_wire() for d in found]})
            return self._reuse_tool(outcome)
        if use.effect == "write" and not self.policy.allows(use.name):
            if self.policy.blocks_all:
                raise Blocked(f"side effects are blocked by policy; tool {use.name!r} "
                              f"({use.call}) was not called", use.inputs)
            served = self.recording.tool_effect(use.name, use.args_hash)
            if served is None:
                raise Blocked(
                    f"the base run never called write tool {use.name!r} with these "
                    f"arguments, so there is no recorded result to serve; allow it "
                    f"({{\"allow\": [\"{use.name}\"]}}) to call it for real", use.inputs)
            return served.result, "reused"
        if self.memoize and not rerun and outcome is not None and same:
            return self._reuse_tool(outcome)
        label: CallLabel = "changed" if outcome is not None and not same else "live"
        self.spend.before(call, call.node, 0.0)
        try:
            result, _ = self.live.tool_call(call, use, ctx)
        except NodeFailure as failure:
            self.spend.after(0.0, call)
            failure.label = label
            raise
        self.spend.after(0.0, call)
        return result, label

    def tool(self, call: NodeCall, node: ToolNode, args: dict[str, Any],
             ctx: ToolContext) -> tuple[Any, CallLabel]:
        substituted = last_applying(self.tools, node.id, call.occurrence)
        if substituted is not None:
            return substituted.result, "simulated"
        if node.effect == "write" and not self.policy.allows(node.id):
            ex = self._guard(call, args)
            return RecordedTool.of(ex, _reused_result(ex, ToolResult)), "reused"
        args_hash = fingerprint(args)
        recorded_hash, outcome = self.recording.tool_call(node.id, call.occurrence)
        asked_changed = self.calls.touch(node.id, call.occurrence)  # its asks: it must run
        if (self.memoize and not asked_changed and outcome is not None
                and recorded_hash == args_hash):
            if isinstance(outcome, CallFailure):
                error = outcome.error
                raise NodeFailure(str(error.get("type")), str(error.get("message")),
                                  label="reused")
            ex = self.recording.by_occurrence[(node.id, call.occurrence)]
            return RecordedTool.of(ex, outcome), "reused"
        label = self._label(node.id, None, None, recorded_hash, recorded_hash == args_hash)
        self.spend.before(call, node.id, 0.0)
        try:
            result, _ = self.live.tool(call, node, args, ctx)
        except NodeFailure as failure:
            self.spend.after(0.0, call)
            failure.label = label
            raise
        self.spend.after(0.0, call)
        return result, label

    @staticmethod
    def _reuse_tool(outcome: ToolResult | CallFailure) -> tuple[Any, CallLabel]:
        if isinstance(outcome, CallFailure):
            raise NodeFailure(str(outcome.error.get("type")), str(outcome.error.get("message")),
                              label="reused")
        return outcome.result, "reused"

    def _guard(self, call: NodeCall, inputs: dict[str, Any]) -> Execution:
        """The base execution to serve for this side effect, or raise Blocked."""
        node = call.node
        if self.policy.blocks_all:
            raise Blocked(f"side effects are blocked by policy; {node!r} was not executed",
                          inputs)
        found = self.recording.effect(call.fingerprint)
        if found is None:
            raise Blocked(
                f"the base run never executed {node!r} with these inputs, so there is no "
                f"recorded result to serve; allow it ({{\"allow\": [\"{node}\"]}}) to run it "
                "for real", inputs)
        return found

    def route(self, call: NodeCall, node: RouterNode) -> str | None:
        forced = self.routes.get(node.id)
        if forced is None or (forced.once and node.id in self.routes_used):
            return None
        self.routes_used.add(node.id)
        return forced.to

    def human(self, call: NodeCall, node: ApprovalNode) -> HumanAnswer | None:
        answer = last_applying(self.humans, call.node, call.occurrence)
        if answer is not None:
            return HumanAnswer(decision=answer.decision, data=answer.data,
                               memory_updates=answer.memory_updates, label="simulated",
                               answered_by="change")
        if self.hitl is not None:
            return self.hitl({"node": call.node, "prompt": node.prompt, "context": call.reads})
        return None

    def human_call(self, call: NodeCall, use: ToolUse) -> HumanAnswer | None:
        """A tool call's gate: a change answering that call (or every gate), the answer the
        base recorded there when the call is in the prefix or, memoized, has the recorded
        arguments; else ``hitl``, else the fork pauses there."""
        node, occurrence = call.node, call.occurrence
        change = self.calls.answer(node, occurrence, use.call) or last_applying(
            self.humans, node, occurrence)
        if change is not None:
            return HumanAnswer(decision=change.decision, data=change.data, label="simulated",
                               answered_by="change")
        name, recorded_hash, _ = self.recording.chosen_tool(node, occurrence, use.call)
        recorded = self.recording.gate_answer(node, occurrence, use.call)
        if recorded is not None and (self.prefix.holds(node, occurrence, use.call) or (
                self.memoize and name == use.name and recorded_hash == use.args_hash)):
            return HumanAnswer(decision=recorded.decision, data=recorded.data, label="reused",
                               recorded=True)
        if self.hitl is not None:
            return self.hitl({"node": node, "call": use.call, "prompt": use.gate_prompt,
                              "context": use.inputs})
        return None

    def subgraph(self, call: NodeCall, node: SubgraphNode, child_input: dict[str, Any],
                 run_child: Callable[[], ChildResult]) -> ChildResult:
        if not self.policy.allows(node.id):
            ex = self._guard(call, child_input)
            return _child_result(_reused_result(ex, ChildOutcome), "reused")
        result = run_child()
        labels = set(result.call_labels)
        label: CallLabel
        if self._targeted(node.id, None, None) or "changed" in labels:
            label = "changed"
        elif labels == {"reused"}:
            label = "reused"
        else:
            label = "live"
        return ChildResult(child_run_id=result.child_run_id, status=result.status,
                           output=result.output, label=label, cost_usd=result.cost_usd,
                           input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                           tainted=result.tainted, call_labels=result.call_labels)
