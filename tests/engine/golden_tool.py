"""Golden event logs: record every demo scenario deterministically and keep the logs in git.

Each ``tests/engine/golden/<scenario>.json`` holds ``{"scenario", "input", "events",
"final_state"}``: the scenario's default input, every event's wire form and the final state's
wire form, recorded with a fixed clock and counter ids so the same engine always writes the
same bytes. ``test_golden_logs.py`` checks that the stored events still fold to the stored
state and that recording the scenario today still produces the stored log, so any change in
what the engine records (event shapes, payloads, ordering, reducer output) shows up as a
failing test instead of silently invalidating logs users already have.

When a change to the recorded form is intended, regenerate the files and review the diff::

    .venv/bin/python -m tests.engine.golden_tool regenerate            # every scenario
    .venv/bin/python -m tests.engine.golden_tool regenerate diamond    # just one
    .venv/bin/python -m tests.engine.golden_tool check                 # exit 1 on drift

A change that alters the *meaning* of existing logs also needs a ``REPLAY_VERSION`` bump.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from forklab.engine.canonical import canonical_equals, canonical_json
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import run_recorded
from forklab.engine.scenarios import SCENARIOS, Scenario

GOLDEN_DIR = Path(__file__).parent / "golden"


def scenario_hitl(scenario: Scenario) -> Callable[[dict[str, Any]], HumanAnswer] | None:
    """The approval callback a scenario is recorded with (``order-fulfilment``: approved)."""
    if scenario.hitl_decision is None:
        return None
    decision = scenario.hitl_decision
    return lambda request: HumanAnswer(decision=decision, answered_by="golden")


def deterministic_env() -> Environment:
    """Fixed clock and counter ids: the same engine records the same log byte for byte."""
    return Environment(clock=FixedClock(), ids=counter_ids("run"))


def record_scenario(name: str) -> dict[str, Any]:
    """Record scenario ``name`` now and return its golden document."""
    scenario = SCENARIOS[name]
    recorded = run_recorded(scenario.graph(), scenario.input, env=deterministic_env(),
                            hitl=scenario_hitl(scenario))
    return {
        "scenario": name,
        "input": scenario.input,
        "events": [event.to_wire() for event in recorded.event_log],
        "final_state": recorded.state.to_wire(),
    }


def golden_path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.json"


def load_golden(name: str) -> dict[str, Any]:
    return json.loads(golden_path(name).read_text())  # type: ignore[no-any-return]


def write_golden(name: str) -> Path:
    path = golden_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record_scenario(name), indent=1, sort_keys=True) + "\n")
    return path


def first_difference(stored: list[dict[str, Any]], fresh: list[dict[str, Any]]) -> str | None:
    """Where two event lists first differ (canonically), as a readable line; None if equal."""
    for i, (old, new) in enumerate(zip(stored, fresh, strict=False)):
        if not canonical_equals(old, new):
            return (f"event #{i + 1} (seq {old.get('seq')}, {old.get('type')}) differs:\n"
                    f"  golden: {canonical_json(old)}\n  now:    {canonical_json(new)}")
    if len(stored) != len(fresh):
        return f"golden log has {len(stored)} events, recording now gives {len(fresh)}"
    return None


def main(argv: Sequence[str]) -> int:
    command, *names = argv or ["check"]
    names = names or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if command not in ("regenerate", "check") or unknown:
        print(f"usage: python -m tests.engine.golden_tool regenerate|check [scenario ...]"
              f"{f' (unknown: {unknown})' if unknown else ''}", file=sys.stderr)
        return 2
    drifted = 0
    for name in names:
        if command == "regenerate":
            print(f"wrote {write_golden(name)}")
            continue
        problem = first_difference(load_golden(name)["events"], record_scenario(name)["events"])
        if problem:
            drifted += 1
            print(f"{name}: {problem}")
    return 1 if drifted else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
