"""Sweeps (SPEC §3.6): one fork per variant from one point, one group, failures isolated."""

from __future__ import annotations

import threading

import pytest

from forklab.engine import change, estimate_sweep, fork_each
from forklab.engine.errors import InvalidChange
from forklab.engine.providers import ChatRequest, ChatResponse, ScriptedProvider
from forklab.engine.reducers import fold
from tests.engine.fork.helpers import Counter, record

VARIANTS = {
    "terse": change.prompt("write", "Be terse."),
    "cold": change.temperature("write", 0.0),
    "small": [change.model("write", "scripted-small")],
    "both": [change.prompt("write", "Be warm."), change.temperature("write", 1.2)],
}


def test_every_variant_forks_the_same_point_and_shares_one_group() -> None:
    base = record("research-write")

    sweep = fork_each(base, at={"before_node": "write"}, variants=VARIANTS)

    assert list(sweep.results) == list(VARIANTS)
    assert sweep.errors == {}
    groups = {r.fork_group_id for r in sweep.results.values()}
    assert groups == {sweep.fork_group_id}
    for name, result in sweep.results.items():
        state = fold(base.store.read(result.run_id))
        assert state.fork.fork_group_id == sweep.fork_group_id
        assert state.label == name
        assert result.fork_sequence_id == 6
        assert result.state.status == "completed"
    drafts = {r.state.memory["draft"] for r in sweep.results.values()}
    assert len(drafts) == len(VARIANTS)
    assert sweep.incurred_cost_usd == pytest.approx(
        sum(r.incurred_cost_usd for r in sweep.results.values()))
    wire = sweep.wire()
    assert set(wire["variants"]) == set(VARIANTS)
    assert wire["fork_group_id"] == sweep.fork_group_id


def test_a_variant_with_a_bad_change_is_recorded_on_its_own_entry() -> None:
    base = record("research-write")

    sweep = fork_each(base, at={"before_node": "write"}, variants={
        "good": change.prompt("write", "a"), "bad": change.prompt("editor", "x"),
        "worse": [change.prompt("write", "a"), change.prompt("write", "b")],
        "fine": change.temperature("write", 0.3)})

    assert sorted(sweep.results) == ["fine", "good"]
    assert sweep.errors["bad"]["code"] == "invalid_change"
    assert "no node 'editor'" in sweep.errors["bad"]["detail"]
    assert sweep.errors["worse"]["code"] == "conflicting_changes"
    assert sweep.wire()["variants"]["bad"]["status"] == "error"
    assert all(r.state.status == "completed" for r in sweep.results.values())


def test_failures_name_each_variant_not_forked_or_whose_run_failed() -> None:
    base = record("flaky-tool")  # its lookup times out in region eu-west

    sweep = fork_each(base, at="start", variants={
        "fixed": change.input_patch({"region": "us-east"}),
        "still": change.prompt("plan", "Plan it twice."), "bad": change.prompt("editor", "x")})

    assert sweep.failures() == {
        "still": "its run failed at node 'fetch_inventory' (node_failed)",
        "bad": "not forked (invalid_change)"}


def test_a_caller_chosen_group_id_and_run_ids_are_used() -> None:
    base = record("research-write")

    sweep = fork_each(base, at={"before_node": "write"}, variants=VARIANTS,
                      fork_group_id="sweep-7", run_ids={"terse": "v-terse"})

    assert sweep.fork_group_id == "sweep-7"
    assert sweep.results["terse"].run_id == "v-terse"


class BarrierProvider:
    """Answers only once ``parties`` calls are in flight together (or fails after 10 s)."""

    name = "barrier"

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=10)
        self.inner = ScriptedProvider()

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.barrier.wait()
        return self.inner.complete(request)


def test_variants_run_concurrently_up_to_the_concurrency_limit() -> None:
    base = record("research-write")
    base.env.providers.register(BarrierProvider(parties=4))
    variants = {f"v{i}": [change.model("write", "scripted-large", provider="barrier"),
                          change.prompt("write", f"Variant {i}.")] for i in range(4)}

    sweep = fork_each(base, at={"before_node": "write"}, variants=variants, concurrency=4)

    # the barrier opens only when all four tails call the model at the same time
    assert sweep.errors == {}
    assert [r.state.status for r in sweep.results.values()] == ["completed"] * 4


class InFlight:
    """Scripted, tracking how many completions overlap."""

    name = "inflight"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.inner = ScriptedProvider()

    def complete(self, request: ChatRequest) -> ChatResponse:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            return self.inner.complete(request)
        finally:
            with self.lock:
                self.now -= 1


def test_concurrency_one_runs_the_variants_one_after_another() -> None:
    base = record("research-write")
    provider = InFlight()
    base.env.providers.register(provider)
    variants = {f"v{i}": [change.model("write", "scripted-large", provider="inflight"),
                          change.prompt("write", f"Variant {i}.")] for i in range(3)}

    sweep = fork_each(base, at={"before_node": "write"}, variants=variants, concurrency=1)

    assert len(sweep.results) == 3
    assert provider.most == 1


def test_with_memoize_a_suffix_the_variants_share_is_paid_for_once() -> None:
    counter = Counter()
    base = record("diamond", counter=counter)
    counter.reset()
    shared_left = change.prompt("left", "Do your part in French.")

    sweep = fork_each(base, at="start", concurrency=1, policy={"memoize": True}, variants={
        "warm": [shared_left, change.temperature("right", 0.9)],
        "cold": [shared_left, change.temperature("right", 0.0)]})

    prompts = [r.system_prompt for r in counter.model_calls]
    assert prompts.count("Do your part in French.") == 1
    left_labels = [next(c["label"] for c in r.calls if c["node"] == "left")
                   for r in sweep.results.values()]
    assert left_labels == ["changed", "reused"]
    assert sweep.results["cold"].memo_hits == [{"node": "plan", "occurrence": 1},
                                               {"node": "left", "occurrence": 1}]


def test_estimate_sweep_predicts_each_variant_without_running_anything() -> None:
    counter = Counter()
    base = record("research-write", counter=counter)
    counter.reset()
    runs = base.store.run_ids()

    estimate = estimate_sweep(base, at={"before_node": "write"}, variants=VARIANTS)

    assert set(estimate["variants"]) == set(VARIANTS)
    assert all(v["live_calls"] == 1 for v in estimate["variants"].values())
    assert estimate["cost_usd"] == pytest.approx(
        sum(v["cost_usd"] for v in estimate["variants"].values()))
    assert len(estimate["lines"]) == len(VARIANTS)
    assert base.store.run_ids() == runs
    assert counter.model_calls == []


def test_estimate_sweep_raises_on_an_unresolvable_change_before_anything_runs() -> None:
    counter = Counter()
    base = record("research-write", counter=counter)
    counter.reset()
    runs = base.store.run_ids()

    with pytest.raises(InvalidChange) as raised:
        estimate_sweep(base, at={"before_node": "write"}, variants={
            "fine": change.prompt("write", "x"), "broken": change.model("ghost", "m")})

    assert "no node 'ghost'" in raised.value.message
    assert base.store.run_ids() == runs
    assert counter.model_calls == []


def test_a_sweep_is_planned_once_and_folds_one_prefix_per_effective_point(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The point is resolved once for every variant, and variants forking at the same
    effective point read one fold of the prefix; a variant whose change moves the point
    (an input patch of a key a prefix node read) folds its own."""
    from forklab.engine.fork import sweep as sweep_module
    from forklab.engine.fork.sweep import plan_sweep, run_sweep

    base = record("research-write")
    resolved: list[object] = []
    resolve = sweep_module.resolve_request

    def counted(*args: object, **kwargs: object) -> object:
        resolved.append(args)
        return resolve(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sweep_module, "resolve_request", counted)
    planned = plan_sweep(base, at={"before_node": "write"},
                         variants={**VARIANTS, "moved": change.input_patch(
                             {"goal": "Explain how tides work"})})
    assert len(resolved) == 1 and planned.errors == {}
    effective = {name: plan.effective.seq for name, plan in planned.plans.items()}
    assert effective["moved"] < effective["terse"] == effective["cold"] == 6
    assert planned.prefixes.folds == 0  # folded when a tail starts, not when planned

    sweep = run_sweep(planned)

    assert sweep.errors == {} and set(sweep.results) == set(planned.plans)
    assert planned.prefixes.folds == 2
    for name, result in sweep.results.items():
        assert result.prefix_state.version == effective[name]
