"""A sweep's variants are independent forks (issue 35, class 1; SPEC §3.6).

Invariant: every variant of a memoized sweep has exactly the outcome of the same fork run
alone. Sharing executions across the sweep (``SharedMemo``) may only save money: it serves a
variant what a sibling really executed under the same fingerprint, never what a sibling's
change supplied (an ``output`` substitution, a ``tool`` result, a forced route, a gate's
answer). The variants here share a change that moves every fingerprint off the base's
recording (so only a sibling can serve them) and differ by one change each, of any kind.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine import change, fork, fork_each, fork_points
from forklab.engine.errors import ForklabError
from tests.engine.properties.changes import changes
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case, same_outcome, show
from tests.engine.properties.world import WORDS, Harness


def _moving_every_reader(graph: Any, value: str) -> Any:
    """A memory change of every key some node reads: no reading node's fingerprint is one
    the base recorded, so only a sibling can serve it."""
    read = sorted({key for node in graph.nodes for key in node.reads})
    return change.memory(set=dict.fromkeys(read, f"swept-{value}"))


def _alone(base: Any, at: Any, items: list[Any]) -> Any:
    try:
        return fork(base, at=at, change=items, policy={"memoize": True},
                    ignore_budget=True).state
    except ForklabError as exc:
        return exc.code


def _variants(case: Any, base: Any, data: st.DataObject) -> dict[str, list[Any]]:
    """Two or three variants sharing one change that moves every reader (so their tails
    overlap), each with its own extra change or none."""
    shared = [_moving_every_reader(case.graph, data.draw(st.sampled_from(WORDS)))]
    extras = data.draw(st.lists(st.one_of(st.none(), changes(case.graph, base.state)),
                                min_size=2, max_size=3), label="each variant's own change")
    return {f"v{i}": shared + ([extra] if extra is not None else [])
            for i, extra in enumerate(extras)}


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_every_variant_of_a_memoized_sweep_has_the_outcome_of_its_fork_run_alone(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    variants = _variants(case, base, data)
    at = {"sequence": point.seq}
    concurrency = data.draw(st.sampled_from([1, 3]), label="concurrency")

    sweep = fork_each(base, at=at, variants=variants, policy={"memoize": True},
                      concurrency=concurrency, ignore_budget=True)

    for name, items in variants.items():
        alone = _alone(base, at, items)
        if name in sweep.errors:
            assert alone == sweep.errors[name]["code"], f"{name}: {sweep.errors[name]}"
            continue
        together = sweep.results[name].state
        assert not isinstance(alone, str), f"{name} forks in a sweep but alone: {alone}"
        assert same_outcome(together, alone), (
            f"{name} ({'; '.join(c.describe() for c in items) or 'no change'}) at "
            f"{point.label}: in the sweep vs alone\n" + show(together, alone))


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_a_variant_stops_at_its_budget_in_a_sweep_exactly_where_it_stops_alone(
        case: Any, data: st.DataObject) -> None:
    """Budgets included: a call a sibling paid for is served free, but the variant's budget
    is checked and spent as if it had made it, so a variant stops (``live_budget_exceeded``)
    in a sweep exactly where it stops alone."""
    h = Harness()
    base = record_case(case, h)
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    variants = _variants(case, base, data)
    budget = {"max_live_calls": data.draw(st.integers(0, 6), label="max_live_calls"),
              "max_cost_usd": data.draw(st.sampled_from([None, 0.0002, 0.001, 1.0]),
                                        label="max_cost_usd")}
    at = {"sequence": point.seq}

    concurrency = data.draw(st.sampled_from([1, 3]), label="concurrency")

    sweep = fork_each(base, at=at, variants=variants, policy={"memoize": True},
                      budget=budget, concurrency=concurrency)

    for name, items in variants.items():
        try:
            alone: Any = fork(base, at=at, change=items, policy={"memoize": True},
                              budget=budget).state
        except ForklabError as exc:
            alone = exc.code
        if name in sweep.errors:
            assert alone == sweep.errors[name]["code"], f"{name}: {sweep.errors[name]}"
            continue
        together = sweep.results[name].state
        assert not isinstance(alone, str), f"{name} forks in a sweep but alone: {alone}"
        assert same_outcome(together, alone), (
            f"{name} ({'; '.join(c.describe() for c in items)}) at {point.label} under "
            f"{budget}: in the sweep vs alone\n" + show(together, alone))
