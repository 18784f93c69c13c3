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
"""

from __future__ import annotations

from forklab.engine.fork.wire import Budget
from forklab.engine.oracle import BudgetExceeded
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


class Spend:
    """Live calls and USD a fork's tail has spent, checked against its budget."""

    def __init__(self, budget: Budget, *, enforce: bool) -> None:
        self.budget = budget
        self.enforce = enforce
        self.live_calls = 0
        self.incurred_usd = 0.0
        self.unpriced_calls = 0

    def before(self, node: str, worst_case: float | None, model: str | None = None) -> None:
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
        limit = self.budget.max_live_calls
        if limit is not None and self.live_calls + 1 > limit:
            raise BudgetExceeded(f"live-call budget of {limit} is spent; node {node!r} would "
                                 "make one more live call")
        if cap is not None and worst_case is not None and self.incurred_usd + worst_case > cap:
            raise BudgetExceeded(
                f"cost budget of ${cap:.4f}: ${self.incurred_usd:.4f} incurred and node "
                f"{node!r}'s next call may cost up to ${worst_case:.4f}")

    def after(self, cost_usd: float | None) -> None:
        """Count one live call (one that raised too); an unpriced one is counted apart."""
        self.live_calls += 1
        if cost_usd is None:
            self.unpriced_calls += 1
        else:
            self.incurred_usd += cost_usd
