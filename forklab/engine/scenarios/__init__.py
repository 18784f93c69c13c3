"""The demo scenarios: graphs that exercise every node kind, offline on the scripted provider.

``SCENARIOS`` maps a name to its graph file and default input; :func:`load_scenario` parses
the graph. ``order-fulfilment``'s approval gate is answered ``approved`` when recorded by
``demo`` (see :data:`AUTO_APPROVE`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklab.engine.errors import ForklabError
from forklab.engine.graph import GraphSpec, load_graph

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Scenario:
    name: str
    input: dict[str, Any]
    description: str = ""
    hitl_decision: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return HERE / f"{self.name}.yaml"

    def graph(self) -> GraphSpec:
        return load_graph(self.path)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("research-write", {"goal": "Explain how vaccines work"}),
    Scenario("review-loop", {"topic": "forklab 1.0 ships today"}),
    Scenario("diamond", {"task": "Compare SQLite and PostgreSQL for a small team"}),
    Scenario("order-fulfilment", {
        "order": {"sku": "WIDGET-1", "qty": 2}, "coupon": "SPRING",
        "shipping": {"express": True, "country": "DE"}, "email": "ada@example.com",
    }, hitl_decision="approved"),
    Scenario("triage-router", {"ticket": "I was charged twice for my subscription this month."}),
    Scenario("flaky-tool", {"region": "eu-west"}),
    Scenario("panel-vote", {"proposal": "Ship the new dashboard on Friday"}),
    Scenario("research-web", {"url": "https://example.org/vaccines",
                               "question": "How do vaccines work?"}),
    Scenario("support-agent", {"ticket": "My order A-1001 arrived damaged. Please refund it.",
                               "product": "Acme Widgets"}),
    Scenario("supervisor", {"ticket": "My order A-1002 never arrived. Please refund it.",
                            "product": "Acme Widgets"}),
)}


class UnknownScenario(ForklabError):
    code = "unknown_scenario"


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise UnknownScenario(
            f"unknown scenario {name!r}; available: {', '.join(SCENARIOS)}", scenario=name
        ) from None


def load_scenario(name: str) -> GraphSpec:
    return get_scenario(name).graph()
