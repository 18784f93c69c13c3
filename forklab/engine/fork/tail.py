"""The fork oracle: how a fork's tail is served (SPEC §3.4).

Decides, for every action of the tail, whether it is substituted by a change (``simulated``),
served from the base run's recording (``reused``), executed for real (``live`` / ``changed``)
or refused (the side-effect guard, budgets). It wraps the live oracle, so everything that
does run for real goes through the same code as a primary run.

Recording indexes are built once from the base run's folded executions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.canonical import canonical_json, fingerprint
from forklab.engine.fork.apply import agent_targets
from forklab.engine.fork.changes import (
    Change,
    HumanResponseChange,
    OutputChange,
    RouteChange,
    ToolChange,
)
from forklab.engine.graph import ApprovalNode, RouterNode, SubgraphNode, ToolNode
from forklab.engine.oracle import (
    Blocked,
    BudgetExceeded,
    ChildResult,
    HumanAnswer,
    LiveOracle,
    NodeCall,
    Served,
)
from forklab.engine.providers import ChatRequest
from forklab.engine.state import Execution, RunState
from forklab.engine.tools import ToolContext

SideEffects = str | dict[str, Any]  # "replay" | "block" | {"allow": [...] | True}


@dataclass(frozen=True)
class Policy:
    side_effects: SideEffects = "replay"
    memoize: bool = False

    @classmethod
    def parse(cls, data: Any) -> Policy:
        if data is None:
            return cls()
        if isinstance(data, Policy):
            return data
        return cls(side_effects=data.get("side_effects", "replay"),
                   memoize=bool(data.get("memoize", False)))

    def allows(self, node: str) -> bool:
        allow = self.side_effects.get("allow") if isinstance(self.side_effects, dict) else None
        return allow is True or (isinstance(allow, list) and node in allow)

    @property
    def blocks_all(self) -> bool:
        return self.side_effects == "block"

    def wire(self) -> dict[str, Any]:
        return {"side_effects": self.side_effects, "memoize": self.memoize}


@dataclass(frozen=True)
class Budget:
    max_live_calls: int | None = 50
    max_cost_usd: float | None = 1.00

    @classmethod
    def parse(cls, data: Any) -> Budget:
        if data is None:
            return cls()
        if isinstance(data, Budget):
            return data
        return cls(max_live_calls=data.get("max_live_calls", 50),
                   max_cost_usd=data.get("max_cost_usd", 1.00))

    def wire(self) -> dict[str, Any]:
        return {"max_live_calls": self.max_live_calls, "max_cost_usd": self.max_cost_usd}


class SharedMemo:
    """Executions recorded by the variants of one sweep, by fingerprint (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_fp: dict[str, Execution] = {}
        self._ambiguous: set[str] = set()

    def add(self, execution: Execution) -> None:
        with self._lock:
            _index_execution(self._by_fp, self._ambiguous, execution)

    def get(self, fp: str) -> Execution | None:
        with self._lock:
            return None if fp in self._ambiguous else self._by_fp.get(fp)


def _outputs(execution: Execution) -> str:
    return canonical_json({"writes": execution.writes, "deletes": execution.deletes,
                           "route": execution.route, "status": execution.status,
                           "error": execution.error})


def _index_execution(by_fp: dict[str, Execution], ambiguous: set[str], ex: Execution) -> None:
    """Add one finished execution; a fingerprint seen with two outputs is never reused.

    Failed executions are indexed too: a null fork re-serves the recorded failure instead of
    calling the failing tool again. So are memoized ones (a fork's memo hits carry the
    recorded actions and outputs), so a null fork of a fork is free as well.
    """
    if ex.status not in ("completed", "failed"):
        return
    known = by_fp.get(ex.fingerprint)
    if known is not None and _outputs(known) != _outputs(ex):
        ambiguous.add(ex.fingerprint)
    by_fp.setdefault(ex.fingerprint, ex)


@dataclass
class Recording:
    """The base run's executions, indexed for memo, side-effect replay and labels."""

    by_fingerprint: dict[str, Execution] = field(default_factory=dict)
    ambiguous: set[str] = field(default_factory=set)
    by_occurrence: dict[tuple[str, int], Execution] = field(default_factory=dict)
    effects: dict[tuple[str, str], Any] = field(default_factory=dict)

    @classmethod
    def of(cls, state: RunState) -> Recording:
        rec = cls()
        for ex in state.executions:
            _index_execution(rec.by_fingerprint, rec.ambiguous, ex)
            rec.by_occurrence[(ex.node, ex.occurrence)] = ex
            args_hash = None
            for action in ex.actions:
                if action["type"] == "tool":
                    args_hash = action["args_hash"]
                elif action["type"] == "tool_result" and args_hash is not None:
                    rec.effects[(ex.node, args_hash)] = action["result"]
                elif action["type"] == "subgraph_result":
                    rec.effects[(ex.node, fingerprint(ex.reads))] = action
        return rec

    def memo(self, fp: str) -> Execution | None:
        return None if fp in self.ambiguous else self.by_fingerprint.get(fp)

    def request_hash(self, node: str, occurrence: int, role: str | None,
                     index: int | None) -> str | None:
        ex = self.by_occurrence.get((node, occurrence))
        if ex is None:
            return None
        for action in ex.actions:  # a memo hit records only the answer, which has the hash too
            if (action["type"] in ("agent", "agent_result") and action["role"] == role
                    and action["index"] == index):
                return str(action["request_hash"])
        return None

    def tool_args(self, node: str, occurrence: int) -> str | None:
        ex = self.by_occurrence.get((node, occurrence))
        for action in ex.actions if ex else ():
            if action["type"] == "tool":
                return str(action["args_hash"])
        return None


class ForkOracle:
    """Serves a fork's tail: changes, recordings, the side-effect guard and budgets."""

    captures_reflections = True

    def __init__(self, live: LiveOracle, *, recording: Recording, changes: Sequence[Change],
                 policy: Policy, budget: Budget, enforce_budget: bool, prices: Any,
                 memoize: bool, shared_memo: SharedMemo | None = None,
                 hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None = None) -> None:
        self.live = live
        self.recording = recording
        self.policy = policy
        self.budget = budget
        self.enforce_budget = enforce_budget
        self.prices = prices
        self.memoize = memoize
        self.shared_memo = shared_memo
        self.hitl = hitl
        self.live_calls = 0
        self.incurred_usd = 0.0
        self.overridden = agent_targets(changes)
        self.outputs = {c.node: c.memory for c in changes if isinstance(c, OutputChange)}
        self.tools = {c.node: c.result for c in changes if isinstance(c, ToolChange)}
        self.routes = {c.source: c for c in changes if isinstance(c, RouteChange)}
        self.routes_used: set[str] = set()
        self.human_change = next((c for c in changes if isinstance(c, HumanResponseChange)), None)

    # -- node level ------------------------------------------------------------------------
    def output(self, call: NodeCall) -> dict[str, Any] | None:
        return self.outputs.get(call.node)

    def memo(self, call: NodeCall) -> Execution | None:
        if not self.memoize or call.node in self.tools or call.node in self.routes:
            return None
        if call.kind == "approval" and (self.human_change is not None or self.hitl is not None):
            return None
        if call.kind in ("tool", "subgraph") and self.policy.blocks_all:
            return None
        found = self.recording.memo(call.fingerprint)
        if found is None and self.shared_memo is not None:
            found = self.shared_memo.get(call.fingerprint)
        return found

    # -- actions ---------------------------------------------------------------------------
    def _spend(self, call: NodeCall) -> None:
        if not self.enforce_budget:
            return
        limit = self.budget.max_live_calls
        if limit is not None and self.live_calls + 1 > limit:
            raise BudgetExceeded(f"live-call budget of {limit} is spent; node {call.node!r} "
                                 "would make one more live call")
        cap = self.budget.max_cost_usd
        if cap is not None and self.incurred_usd >= cap:
            raise BudgetExceeded(f"cost budget of ${cap:.4f} is spent (${self.incurred_usd:.4f} "
                                 f"incurred); node {call.node!r} would spend more")

    def _label(self, call: NodeCall, recorded: str | None, actual: str) -> str:
        if call.node in self.overridden or recorded is None:
            return "live"
        return "changed" if recorded != actual else "live"

    def agent(self, call: NodeCall, request: ChatRequest, role: str | None,
              index: int | None) -> Served:
        self._spend(call)
        served = self.live.agent(call, request, role, index)
        self.live_calls += 1
        cost = self.prices.cost(request.model, served.input_tokens, served.output_tokens)
        self.incurred_usd += cost or 0.0
        recorded = self.recording.request_hash(call.node, call.occurrence, role, index)
        label = self._label(call, recorded, request.request_hash)
        return Served(text=served.text, input_tokens=served.input_tokens,
                      output_tokens=served.output_tokens, latency_ms=served.latency_ms,
                      label=label)

    def tool(self, call: NodeCall, node: ToolNode, args: dict[str, Any],
             ctx: ToolContext) -> tuple[Any, str]:
        if node.id in self.tools:
            return self.tools[node.id], "simulated"
        args_hash = fingerprint(args)
        if node.effect == "write" and not self.policy.allows(node.id):
            self._guard(node.id, args, (node.id, args_hash))
            return self.recording.effects[(node.id, args_hash)], "reused"
        self._spend(call)
        result, _ = self.live.tool(call, node, args, ctx)
        self.live_calls += 1
        return result, self._label(call, self.recording.tool_args(node.id, call.occurrence),
                                   args_hash)

    def _guard(self, node: str, inputs: dict[str, Any], key: tuple[str, str]) -> None:
        """Raise Blocked unless policy ``replay`` has a recording for these exact inputs."""
        if self.policy.blocks_all:
            raise Blocked(f"side effects are blocked by policy; {node!r} was not executed",
                          inputs)
        if key not in self.recording.effects:
            raise Blocked(
                f"the base run never executed {node!r} with these inputs, so there is no "
                f"recorded result to serve; allow it ({{\"allow\": [\"{node}\"]}}) to run it "
                "for real", inputs)

    def route(self, call: NodeCall, node: RouterNode) -> str | None:
        forced = self.routes.get(node.id)
        if forced is None or (forced.once and node.id in self.routes_used):
            return None
        self.routes_used.add(node.id)
        return forced.to

    def human(self, call: NodeCall, node: ApprovalNode) -> HumanAnswer | None:
        if self.human_change is not None:
            answer = self.human_change
            return HumanAnswer(decision=answer.decision, data=answer.data,
                               memory_updates=answer.memory_updates, label="simulated",
                               answered_by="change")
        if self.hitl is not None:
            return self.hitl({"node": call.node, "prompt": node.prompt, "context": call.reads})
        return None

    def subgraph(self, call: NodeCall, node: SubgraphNode, child_input: dict[str, Any],
                 run_child: Callable[[], ChildResult]) -> ChildResult:
        key = (node.id, fingerprint(call.reads))
        if not self.policy.allows(node.id):
            self._guard(node.id, child_input, key)
            action = self.recording.effects[key]
            return ChildResult(child_run_id=action["child_run_id"], status=action["status"],
                               output=action["output"], label="reused",
                               cost_usd=action.get("cost_usd", 0.0),
                               input_tokens=action.get("input_tokens", 0),
                               output_tokens=action.get("output_tokens", 0))
        self._spend(call)
        self.live_calls += 1
        result = run_child()
        self.incurred_usd += result.cost_usd
        return result

