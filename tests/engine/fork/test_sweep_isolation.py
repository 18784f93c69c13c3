"""A sweep's variants never see what a sibling's change supplied (issue 35, class 1).

Memo sharing across a sweep offers a variant what another variant *executed* under the same
inputs. What a change supplied — an ``output`` substitution, a ``tool`` result, a
``human_response`` answer, a forced route — was never executed: a variant that does not
carry that change must execute the node (or pause at the gate), exactly as it would alone.
"""

from __future__ import annotations

from typing import Any

from forklab.engine import change, fork, fork_each
from forklab.engine.canonical import canonical_equals
from tests.engine.properties.builders import agent, chain, record, tool
from tests.engine.properties.world import Harness

GATE = {"id": "gate", "kind": "approval", "reads": ["topic"], "writes": ["verdict"],
        "prompt": "Release?", "on_reject": "end"}


def _graph() -> Any:
    return chain("leak", agent("draft", ["topic"], "text"), tool("look", ["topic"], ["found"]),
                 GATE, agent("final", ["text", "found", "verdict"], "summary"))


def _alone(base: Any, variant: Any) -> Any:
    return fork(base, at="start", change=variant, policy={"memoize": True},
                ignore_budget=True).state


def test_a_variant_is_not_served_a_siblings_substituted_output_or_tool_result() -> None:
    h = Harness()
    base = record(h, _graph(), {"topic": "cats"})
    moved = change.memory(set={"topic": "dogs"})
    variants = {
        "supplied": [moved, change.output("draft", {"text": "given"}),
                     change.tool("look", "given"), change.human_response("approved")],
        "plain": [moved, change.human_response("approved")],
    }

    sweep = fork_each(base, at="start", variants=variants, policy={"memoize": True},
                      concurrency=1, ignore_budget=True)

    plain = sweep.results["plain"].state
    assert plain.memory["text"] != "given" and plain.memory["found"] != "given"
    assert canonical_equals(plain.outcome(), _alone(base, variants["plain"]).outcome())


def test_a_variant_that_answers_no_gate_pauses_although_a_sibling_answered_it() -> None:
    h = Harness()
    base = record(h, _graph(), {"topic": "cats"})
    moved = change.memory(set={"topic": "dogs"})
    variants = {"answers": [moved, change.human_response("approved")], "asks": [moved]}

    sweep = fork_each(base, at="start", variants=variants, policy={"memoize": True},
                      concurrency=1, ignore_budget=True)

    assert sweep.results["answers"].state.status == "completed"
    assert sweep.results["asks"].state.status == "paused"
    assert _alone(base, variants["asks"]).status == "paused"
