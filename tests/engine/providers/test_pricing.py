"""Claude models the anthropic provider is asked for most are priced out of the box."""

from __future__ import annotations

import pytest

from forklab.engine.providers import PriceTable


@pytest.mark.parametrize(("model", "input_usd", "output_usd"), [
    ("claude-sonnet-4-5", 3.00, 15.00),
    ("claude-sonnet-4-20250514", 3.00, 15.00),
    ("claude-haiku-4-5", 1.00, 5.00),
    ("claude-opus-4-5-20251101", 5.00, 25.00),
    ("claude-3-5-haiku-latest", 0.80, 4.00),
])
def test_current_claude_models_cost_their_list_price(model: str, input_usd: float,
                                                     output_usd: float) -> None:
    assert PriceTable().cost(model, 1_000_000, 1_000_000) == pytest.approx(
        input_usd + output_usd)
