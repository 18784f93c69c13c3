"""A fork's budget and what its tail has spent (SPEC §3.4 budgets).

One :class:`Spend` is shared by a fork's tail and every child run a subgraph node starts in
it, so ``max_live_calls`` and ``max_cost_usd`` bound the whole tail, subgraphs included.

Invariants:
- :meth:`Spend.before` runs before every live call and refuses it (``BudgetExceeded``) when
  ``live_calls + 1 > max_live_calls`` or ``incurred + worst_case > max_cost_usd``; so the
  cost cap is never overshot (up to the provider's token count exceeding the estimate);
- under a cost cap, a call whose worst case is unknown (an unpriced model) is refused with
  code ``unpriced_model`` rather than counted as free;
- :meth:`Spend.after` runs after every live call, including one that raised: each counts.

With concurrent nodes (``engine.scheduler``) the checks follow the sequential order: a node's
calls are counted on its own ledger and join the spent totals when the node is settled (at
its ``node.completed`` / ``node.failed``, in log order), so the node at the head is checked
against exactly what the nodes before it spent. A node starts ahead of the head only when
:meth:`Spend.admits` the worst case of every unsettled node before it plus its own — so
whatever those spend, its calls pass the checks the sequential order would make. A node that
ran ahead of a node that stopped the run is never settled (its work is not in the log).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from forklab.engine.fork.wire import Budget
from forklab.engine.graph import AgentNode, GraphSpec, RouterNode, ToolNode
from forklab.engine.oracle import BudgetExceeded, NodeCall
from forklab.engine.providers import ChatRequest, PriceTable, estimate_tokens


def request_input_tokens(request: ChatRequest) -> int:
    """The request's input tokens, estimated the way the scripted provider counts them."""
    text = request.system_prompt + "".join(str(m.get("content", "")) for m in request.messages)
    return estimate_tokens(text) + 4 * (len(request.messages) + 1)


def worst_case_usd(request: ChatRequest, prices: PriceTable) -> float | None:
    """Most a call can cost: its input tokens plus ``max_tokens`` of output (None: unpriced)."""
    price = prices.price(request.model)
    if price is None:
        return None
    return (request_input_tokens(request) * price.input_per_mtok
            + request.max_tokens * price.output_per_mtok) / 1_000_000


@dataclass
class Ledger:
    """What one node execution has spent so far (not yet settled into the totals)."""

    live_calls: int = 0
    incurred_usd: float = 0.0
    unpriced_calls: int = 0


# a cost reservation leaves this much of the cap unused, so rounding in a sum of worst
# cases can never admit a call the sequential check would refuse
_MARGIN = 1e-9


def worst_case(graph: GraphSpec, node: Any, call: NodeCall | None,
               prices: PriceTable) -> tuple[int | None, float | None]:
    """Most live calls and USD one live execution of ``node`` can spend.

    A single-agent node or an agent router: one call, costed from the request it will send
    (known once its read slice is, ``call``); a read tool: one free call; a rules router: none;
    a multi-role node: one call per instance, its cost unknown up front (later roles see
    earlier answers); approvals, write tools and subgraphs: unbounded."""
    from forklab.engine.agent_loop import uses_loop
    from forklab.engine.asking import chat_request, render

    if isinstance(node, ToolNode):
        return (1, 0.0) if node.effect == "read" else (None, None)
    if isinstance(node, RouterNode) and node.agent is None:
        return 0, 0.0
    if isinstance(node, AgentNode) and node.roles:
        return sum(role.count for role in node.roles.values()), None
    if not isinstance(node, (AgentNode, RouterNode)) or node.agent is None:
        return None, None
    if isinstance(node, AgentNode) and uses_loop(node, graph.resolve_agent(node.agent)):
        return None, None  # a tool loop: its turns and tool calls are known as they come
    if call is None:
        return 1, None
    user = {"role": "user", "content": render(node.prompt, call.reads)}
    choices = sorted(node.choices or {}) if isinstance(node, RouterNode) else node.choices
    request = chat_request(graph.resolve_agent(node.agent), [user], choices)
    return 1, worst_case_usd(request, prices)


class Spend:
    """Live calls and USD a fork's tail has spent, checked against its budget.

    ``live_calls``, ``incurred_usd`` and ``unpriced_calls`` are the settled totals; each
    node execution (keyed by its ``NodeCall``) spends on its own ledger until settled."""

    def __init__(self, budget: Budget, *, enforce: bool) -> None:
        self.budget = budget
        self.enforce = enforce
        self.live_calls = 0
        self.incurred_usd = 0.0
        self.unpriced_calls = 0
        self._lock = threading.Lock()
        self._ledgers: dict[int, tuple[Any, Ledger]] = {}

    def _ledger(self, call: Any) -> Ledger:
        with self._lock:
            held = self._ledgers.get(id(call))
            if held is None:  # the call object is kept, so its id is not reused meanwhile
                held = self._ledgers[id(call)] = (call, Ledger())
            return held[1]

    def settle(self, call: Any, *, kept: bool) -> None:
        """The execution ended: its spend joins the totals (``kept``) or is dropped."""
        with self._lock:
            held = self._ledgers.pop(id(call), None)
            if held is None or not kept:
                return
            ledger = held[1]
            self.live_calls += ledger.live_calls
            self.incurred_usd += ledger.incurred_usd
            self.unpriced_calls += ledger.unpriced_calls

    def admits(self, calls: int | None, usd: float | None) -> bool:
        """Whether ``calls`` more live calls costing up to ``usd`` (None: unbounded) fit in
        what is left of the budget after the settled totals."""
        if not self.enforce:
            return True
        limit, cap = self.budget.max_live_calls, self.budget.max_cost_usd
        with self._lock:
            if limit is not None and (calls is None or self.live_calls + calls > limit):
                return False
            return cap is None or (usd is not None
                                   and self.incurred_usd + usd <= cap * (1 - _MARGIN))

    def before(self, call: Any, node: str, worst_case: float | None,
               model: str | None = None) -> None:
        """Refuse the next live call of ``node`` if it could break the budget.

        ``ignore_budget`` (``enforce=False``) waives the limits but, as up front, not the
        refusal of an unpriced model under a cost budget.
        """
        cap = self.budget.max_cost_usd
        if cap is not None and worst_case is None:
            raise BudgetExceeded(
                f"node {node!r} would call model {model!r}, which has no price, under a cost "
                f"budget of ${cap:.4f}; add a price or clear max_cost_usd",
                code="unpriced_model")
        if not self.enforce:
            return
        own = self._ledger(call)
        with self._lock:
            calls, incurred = self.live_calls + own.live_calls, self.incurred_usd + own.incurred_usd
        limit = self.budget.max_live_calls
        if limit is not None and calls + 1 > limit:
            raise BudgetExceeded(f"live-call budget of {limit} is spent; node {node!r} would "
                                 "make one more live call")
        if cap is not None and worst_case is not None and incurred + worst_case > cap:
            raise BudgetExceeded(
                f"cost budget of ${cap:.4f}: ${incurred:.4f} incurred and node "
                f"{node!r}'s next call may cost up to ${worst_case:.4f}")

    def after(self, cost_usd: float | None, call: Any = None) -> None:
        """Count one live call (one that raised too); an unpriced one is counted apart.

        With ``call`` it goes on that execution's ledger, else straight into the totals."""
        ledger = self._ledger(call) if call is not None else None
        with self._lock:
            target: Any = ledger if ledger is not None else self
            target.live_calls += 1
            if cost_usd is None:
                target.unpriced_calls += 1
            else:
                target.incurred_usd += cost_usd
