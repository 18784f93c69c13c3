"""Model prices (USD per million tokens) and the cost of a call.

The default table covers the scripted models and common hosted ones; settings extend or
override it (``FORKLAB_PRICES``). A model absent from the table is *unpriced*: its cost is
``None``, never a guessed zero, so budgets can refuse it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float


DEFAULT_PRICES: dict[str, Price] = {
    "scripted-small": Price(0.50, 1.50),
    "scripted-large": Price(3.00, 15.00),
    "scripted-mini": Price(0.10, 0.40),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "claude-sonnet-4": Price(3.00, 15.00),
    "claude-haiku-4": Price(0.80, 4.00),
    # Anthropic: the API's aliases and the dated ids they resolve to (the Messages API
    # answers with the model id it was asked for); newer models via FORKLAB_PRICES
    "claude-sonnet-4-0": Price(3.00, 15.00),
    "claude-sonnet-4-20250514": Price(3.00, 15.00),
    "claude-sonnet-4-5": Price(3.00, 15.00),
    "claude-sonnet-4-5-20250929": Price(3.00, 15.00),
    "claude-opus-4-1": Price(15.00, 75.00),
    "claude-opus-4-1-20250805": Price(15.00, 75.00),
    "claude-opus-4-5": Price(5.00, 25.00),
    "claude-opus-4-5-20251101": Price(5.00, 25.00),
    "claude-haiku-4-5": Price(1.00, 5.00),
    "claude-haiku-4-5-20251001": Price(1.00, 5.00),
    "claude-3-5-haiku-latest": Price(0.80, 4.00),
    "claude-3-5-haiku-20241022": Price(0.80, 4.00),
    "llama3.1:8b": Price(0.0, 0.0),
}


class PriceTable:
    """Prices by model name; ``cost`` returns None for an unpriced model."""

    def __init__(self, extra: Mapping[str, Price | Mapping[str, float]] | None = None) -> None:
        self._prices = dict(DEFAULT_PRICES)
        for model, price in (extra or {}).items():
            self._prices[model] = (
                price if isinstance(price, Price)
                else Price(float(price["input_per_mtok"]), float(price["output_per_mtok"]))
            )

    def is_priced(self, model: str) -> bool:
        return model in self._prices

    def price(self, model: str) -> Price | None:
        return self._prices.get(model)

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float | None:
        price = self._prices.get(model)
        if price is None:
            return None
        return round(
            (input_tokens * price.input_per_mtok + output_tokens * price.output_per_mtok)
            / 1_000_000,
            10,
        )

    def models(self) -> list[str]:
        return sorted(self._prices)
