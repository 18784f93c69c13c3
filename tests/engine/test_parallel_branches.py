"""Parallel branches: independent ready nodes really execute at once, bounded by
``max_concurrency``, and the log is the sequential one (docs/forking.md)."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest

from forklab.engine import fork, parse_graph, run_recorded
from forklab.engine.canonical import canonical_json
from forklab.engine.context import Cancelled
from forklab.engine.environment import (
    Environment,
    FixedClock,
    counter_ids,
    max_concurrency_from_env,
)
from forklab.engine.errors import ConfigurationError
from forklab.engine.providers import ChatRequest, ChatResponse, ProviderRegistry, ScriptedProvider

WORKERS = 6


class OverlapProvider:
    """The scripted provider, counting calls in flight; worker calls meet at a barrier of
    ``parties`` (broken after a timeout), so they complete only if that many overlap."""

    name = "scripted"

    def __init__(self, parties: int | None) -> None:
        self.inner = ScriptedProvider()
        self.barrier = threading.Barrier(parties, timeout=10) if parties else None
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.calls = 0

    def complete(self, request: ChatRequest) -> ChatResponse:
        with self.lock:
            self.calls += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.barrier is not None and request.system_prompt.startswith("worker"):
                self.barrier.wait()  # BrokenBarrierError: the calls did not overlap
            return self.inner.complete(request)
        finally:
            with self.lock:
                self.in_flight -= 1


def fanout(max_concurrency: int | None = None, *, latency_ms: int = 0) -> Any:
    workers = [f"w{i}" for i in range(WORKERS)]
    spec: dict[str, Any] = {
        "id": "fan", "start": "plan",
        "nodes": [
            {"id": "plan", "kind": "agent", "agent": {"system_prompt": "plan"},
             "reads": ["task"], "writes": ["plan"], "prompt": "{task}"},
            *({"id": w, "kind": "agent", "reads": ["plan"], "writes": [w], "prompt": "{plan}",
               "agent": {"system_prompt": f"worker {w}", "latency_ms": latency_ms}}
              for w in workers),
            {"id": "join", "kind": "agent", "join": "all", "agent": {"system_prompt": "join"},
             "reads": workers, "writes": ["answer"], "prompt": "{w0} {w5}"},
        ],
        "edges": [*({"from": "plan", "to": w} for w in workers),
                  *({"from": w, "to": "join"} for w in workers)],
    }
    if max_concurrency is not None:
        spec["max_concurrency"] = max_concurrency
    return parse_graph(spec)


def env(provider: Any, max_concurrency: int = 16, ids: str = "run") -> Environment:
    return Environment(clock=FixedClock(), ids=counter_ids(ids),
                       providers=ProviderRegistry({"scripted": provider}),
                       max_concurrency=max_concurrency)


def wire(events: Any) -> list[str]:
    return [canonical_json(e.to_wire()) for e in events]


def test_a_fan_out_runs_its_workers_at_once_up_to_max_concurrency() -> None:
    provider = OverlapProvider(parties=3)

    recorded = run_recorded(fanout(max_concurrency=3), {"task": "t"}, env=env(provider))

    assert recorded.state.status == "completed", recorded.state.error
    assert provider.most_in_flight == 3
    assert provider.calls == WORKERS + 2


def test_the_log_of_a_concurrent_fan_out_is_the_sequential_log() -> None:
    sequential = run_recorded(fanout(), {"task": "t"}, env=env(OverlapProvider(None), 1))
    concurrent = run_recorded(fanout(), {"task": "t"},
                              env=env(OverlapProvider(parties=WORKERS), WORKERS))

    assert wire(concurrent.event_log) == wire(sequential.event_log)
    starts = [e.node for e in concurrent.event_log if e.type == "node.started"]
    assert starts == ["plan", *(f"w{i}" for i in range(WORKERS)), "join"]


def test_the_graph_setting_wins_over_the_environment_default() -> None:
    provider = OverlapProvider(parties=None)

    run_recorded(fanout(max_concurrency=1), {"task": "t"}, env=env(provider, WORKERS))

    assert provider.most_in_flight == 1


def test_a_fork_tail_runs_its_changed_workers_at_once() -> None:
    base = run_recorded(fanout(max_concurrency=3), {"task": "t"},
                        env=env(OverlapProvider(parties=3)))
    provider = OverlapProvider(parties=3)
    base.env = env(provider, ids="fork")

    result = fork(base, at={"before_node": "plan"},
                  change={"kind": "prompt", "target": "plan", "system_prompt": "plan anew"},
                  budget={"max_live_calls": 20, "max_cost_usd": None})

    assert result.state.status == "completed", result.state.error
    assert provider.most_in_flight == 3
    assert [c["label"] for c in result.calls] == ["changed"] * (WORKERS + 2)


def test_a_node_is_checked_against_what_the_nodes_before_it_spent_not_the_ones_ahead() -> None:
    from forklab.engine.fork.spend import Budget, Spend
    from forklab.engine.oracle import BudgetExceeded

    spend = Spend(Budget(max_live_calls=2, max_cost_usd=None), enforce=True)
    head, ahead = object(), object()
    spend.before(ahead, "w1", 0.0)
    spend.after(0.0, ahead)
    spend.before(ahead, "w1", 0.0)
    spend.after(0.0, ahead)  # ahead has spent the whole budget on its own ledger …

    spend.before(head, "w0", 0.0)  # … which the head, before it in the log, does not see
    spend.after(0.0, head)
    spend.settle(head, kept=True)

    assert spend.live_calls == 1
    assert not spend.admits(2, 0.0) and spend.admits(1, 0.0)
    with pytest.raises(BudgetExceeded):  # settled in order, the ahead node's 2nd call is over
        spend.before(ahead, "w1", 0.0)


@pytest.mark.parametrize("raw", ["0", "-1", "many", "257"])
def test_a_malformed_max_concurrency_setting_names_the_variable(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="FORKLAB_MAX_CONCURRENCY"):
        max_concurrency_from_env({"FORKLAB_MAX_CONCURRENCY": raw})


def test_the_max_concurrency_setting_defaults_to_16() -> None:
    assert max_concurrency_from_env({}) == 16
    assert max_concurrency_from_env({"FORKLAB_MAX_CONCURRENCY": "4"}) == 4


def wide_fanout(workers: int) -> Any:
    names = [f"w{i}" for i in range(workers)]
    return parse_graph({
        "id": "wide", "start": "plan",
        "nodes": [
            {"id": "plan", "kind": "agent", "agent": {"system_prompt": "plan"},
             "reads": ["task"], "writes": ["plan"], "prompt": "{task}"},
            *({"id": w, "kind": "agent", "reads": ["plan"], "writes": [w], "prompt": "{plan}",
               "agent": {"system_prompt": f"worker {w}"}} for w in names),
            {"id": "join", "kind": "agent", "join": "all", "agent": {"system_prompt": "join"},
             "reads": names, "writes": ["answer"], "prompt": "{w0}"},
        ],
        "edges": [*({"from": "plan", "to": w} for w in names),
                  *({"from": w, "to": "join"} for w in names)],
    })


class WaitingProvider(OverlapProvider):
    """Worker 0's call waits (up to 10 s) until ``ready`` is set, and says whether it was."""

    def __init__(self) -> None:
        super().__init__(parties=None)
        self.ready = threading.Event()
        self.waited: bool | None = None

    def complete(self, request: ChatRequest) -> ChatResponse:
        if request.system_prompt == "worker w0, anew":
            self.waited = self.ready.wait(timeout=10)
        return super().complete(request)


def fork_wide(width: int, monkeypatch: pytest.MonkeyPatch,
              workers: int) -> tuple[Any, WaitingProvider, list[str]]:
    """Fork a recorded fan-out of ``workers`` changing w0, at ``max_concurrency`` ``width``:
    (result, provider, the nodes whose fingerprints were computed in the fork's tail)."""
    from forklab.engine import runner, scheduler

    base = run_recorded(wide_fanout(workers), {"task": "t"},
                        env=env(OverlapProvider(None), ids="base"))
    provider = WaitingProvider()
    base.env = env(provider, max_concurrency=width, ids="fork")
    computed: list[str] = []
    original = scheduler.execution_fingerprint

    def counted(graph: Any, store: Any, node_id: str, *args: Any, **kwargs: Any) -> str:
        computed.append(node_id)
        if node_id == f"w{workers - 1}":
            provider.ready.set()  # the last sibling is predicted
        return original(graph, store, node_id, *args, **kwargs)

    monkeypatch.setattr(scheduler, "execution_fingerprint", counted)
    monkeypatch.setattr(runner, "execution_fingerprint", counted)
    if width == 1:
        provider.ready.set()  # sequential: nothing overlaps, w0 need not wait
    try:
        result = fork(base, at={"before_node": "w0"}, policy={"memoize": True},
                      change={"kind": "prompt", "target": "w0",
                              "system_prompt": "worker w0, anew"})
    finally:
        monkeypatch.undo()
    assert result.state.status == "completed", result.state.error
    assert provider.calls == 2  # w0 and the join
    return result, provider, computed


def test_a_changed_worker_calls_while_the_runner_prepares_its_served_siblings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker 0 changed, its 39 siblings memo hits: w0's call is in flight while the runner
    computes the siblings' fingerprints (each once: the burst after w0 uses them), and the
    fork's log is the sequential fork's."""
    workers = 40
    sequential, _, _ = fork_wide(1, monkeypatch, workers)
    concurrent, provider, computed = fork_wide(4, monkeypatch, workers)

    assert provider.waited is True  # the siblings were predicted during w0's call
    siblings = [f"w{i}" for i in range(1, workers)]
    assert sorted(n for n in computed if n in siblings) == sorted(siblings)
    assert wire(concurrent.event_log) == wire(sequential.event_log)


class JoinCallProvider(OverlapProvider):
    """Sets ``called`` when the join's call is made."""

    def __init__(self) -> None:
        super().__init__(parties=None)
        self.called = threading.Event()

    def complete(self, request: ChatRequest) -> ChatResponse:
        if request.system_prompt == "join":
            self.called.set()
        return super().complete(request)


def test_a_call_after_served_nodes_is_made_while_they_are_stored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The join after 39 served workers: the store's append of the batch that holds them
    (and the join's start) waits for the join's call to begin, so it completes only if the
    call is made beside it — and the log is the sequential fork's."""
    from forklab.engine import runner

    monkeypatch.setattr(runner, "STORE_BESIDE_MIN", 8)
    monkeypatch.setattr(runner, "FAST_CALL_S", 0)  # no fast-call exception: stored before
    logs, beside = [], []
    for width in (1, 4):
        base = run_recorded(wide_fanout(40), {"task": "t"},
                            env=env(OverlapProvider(None), ids="base"))
        provider = JoinCallProvider()
        base.env = env(provider, max_concurrency=width, ids="fork")
        store, original = base.store, base.store.append

        def append(run_id: str, events: Any, *args: Any, _original: Any = original,
                   _provider: JoinCallProvider = provider,
                   _timeout: float = 0.2 if width == 1 else 10, **kwargs: Any) -> Any:
            if any(e.type == "node.started" and e.node == "join" for e in events):
                beside.append(_provider.called.wait(timeout=_timeout))
            return _original(run_id, events, *args, **kwargs)

        monkeypatch.setattr(store, "append", append)
        result = fork(base, at={"before_node": "w0"}, policy={"memoize": True},
                      change={"kind": "prompt", "target": "w0",
                              "system_prompt": "worker w0, anew"})
        assert result.state.status == "completed", result.state.error
        assert provider.calls == 2
        logs.append(wire(result.event_log))
    assert beside == [False, True]  # in place (width 1) the batch is stored before the call
    assert logs[0] == logs[1]


class Crash(BaseException):
    """The process dies: what it was appending is never stored."""


class PaidProvider(OverlapProvider):
    """Counts completed calls per request (a call paid for, as tests/faults counts them)
    and sets ``join_paid`` once the join's call has completed."""

    def __init__(self) -> None:
        super().__init__(parties=None)
        self.paid: dict[str, int] = {}
        self.join_paid = threading.Event()

    def complete(self, request: ChatRequest) -> ChatResponse:
        response = super().complete(request)
        with self.lock:
            self.paid[request.request_hash] = self.paid.get(request.request_hash, 0) + 1
        if request.system_prompt == "join":
            self.join_paid.set()
        return response


def test_a_crash_while_the_burst_is_stored_beside_the_join_s_call_pays_only_that_call_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the join's call beside the burst's store costs when the process dies then
    (docs/forking.md, parallel branches): the call completes, the burst's transaction never
    commits, the fork is resumed from its log (fork_runner). The join's call is paid a
    second time — and nothing else: w0's answer was stored at its node's end before the
    burst, the served workers pay nothing. In place (width 1) the same crash comes before
    the join's call is made, and every call is paid once."""
    from forklab.engine import runner
    from forklab.engine.fork.variant import fork_runner

    monkeypatch.setattr(runner, "STORE_BESIDE_MIN", 8)
    monkeypatch.setattr(runner, "FAST_CALL_S", 0)
    twice = []
    for width in (1, 4):
        base = run_recorded(wide_fanout(40), {"task": "t"},
                            env=env(OverlapProvider(None), ids="base"))
        provider = PaidProvider()
        base.env = env(provider, max_concurrency=width, ids="fork")
        store, original = base.store, base.store.append
        crashed: list[str] = []

        def append(run_id: str, events: Any, *args: Any, _original: Any = original,
                   _provider: PaidProvider = provider, _crashed: list[str] = crashed,
                   _width: int = width, **kwargs: Any) -> Any:
            if not _crashed and any(e.type == "node.started" and e.node == "join"
                                    for e in events):
                _crashed.append(run_id)
                if _width > 1:  # beside: dies once the call it runs beside has returned
                    assert _provider.join_paid.wait(timeout=10)
                raise Crash
            return _original(run_id, events, *args, **kwargs)

        monkeypatch.setattr(store, "append", append)
        with pytest.raises(Crash):
            fork(base, at={"before_node": "w0"}, policy={"memoize": True},
                 change={"kind": "prompt", "target": "w0", "system_prompt": "worker w0, anew"})
        monkeypatch.setattr(store, "append", original)
        (run_id,) = crashed
        stored = store.read(run_id)
        assert stored[-1].type == "node.completed" and stored[-1].node == "w0"

        resumed = fork_runner(run_id, store=store, env=base.env).resume()

        assert resumed.status == "completed", resumed.error
        paid_in_log = [c for c in resumed.calls[resumed.fork.tail_from_call:]
                       if c.label in ("live", "changed")]
        assert [c.node for c in paid_in_log] == ["w0", "join"]  # each once in the log
        twice.append(sorted(n for n, count in provider.paid.items() if count > 1))
        join_hashes = {a.request_hash for a in resumed.executions[-1].actions
                       if hasattr(a, "request_hash")}
        assert set(twice[-1]) <= join_hashes
    assert twice[0] == [] and len(twice[1]) == 1  # beside: exactly the join's call again


class OpeningProvider(PaidProvider):
    """Sets ``began`` when w0's changed call begins and ``w0_paid`` once it completed."""

    def __init__(self) -> None:
        super().__init__()
        self.began = threading.Event()
        self.w0_paid = threading.Event()
        self.began_before_opening: bool | None = None

    def complete(self, request: ChatRequest) -> ChatResponse:
        changed = request.system_prompt == "worker w0, anew"
        if changed:
            self.began.set()
        response = super().complete(request)
        if changed:
            self.w0_paid.set()
        return response


def _fork_w0(width: int, monkeypatch: pytest.MonkeyPatch, append: Any = None,
             hash_error: Exception | None = None) -> tuple[OpeningProvider, Any]:
    """(provider, run the fork): a recorded 12-worker fan-out forked changing w0 at
    ``max_concurrency`` ``width``. Building the opening's graph hash first waits for w0's
    call to begin (10 s where it runs beside the opening, 0.2 s in place, where it cannot)
    and records whether it did (``began_before_opening``), then raises ``hash_error`` if
    given; ``append(original)`` wraps the store's append."""
    from forklab.engine.fork import variant

    base = run_recorded(wide_fanout(12), {"task": "t"}, env=env(OverlapProvider(None), ids="base"))
    provider = OpeningProvider()
    base.env = env(provider, max_concurrency=width, ids="fork")
    hashed = variant.graph_hash

    def graph_hash(graph: Any) -> str:
        provider.began_before_opening = provider.began.wait(timeout=10 if width > 1 else 0.2)
        if hash_error is not None:
            raise hash_error
        return hashed(graph)

    monkeypatch.setattr(variant, "graph_hash", graph_hash)
    if append is not None:
        monkeypatch.setattr(base.store, "append", append(base.store.append, provider))
    return provider, lambda: fork(
        base, at={"before_node": "w0"}, policy={"memoize": True},
        change={"kind": "prompt", "target": "w0", "system_prompt": "worker w0, anew"})


def test_a_fork_s_first_model_call_is_made_while_its_opening_is_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The changed worker's call begins before the fork's opening events are built (the
    graph hash: milliseconds for a large graph), and the log is the sequential fork's, in
    which the opening is built and stored first."""
    logs, before = [], []
    for width in (1, 4):
        provider, run_fork = _fork_w0(width, monkeypatch)
        result = run_fork()
        assert result.state.status == "completed", result.state.error
        assert provider.calls == 2
        before.append(provider.began_before_opening)
        logs.append(wire(result.event_log))
    assert before == [False, True]
    assert logs[0] == logs[1]


def test_a_fork_whose_opening_fails_to_build_leaves_nothing_running(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """w0 was launched before the opening; building the opening raises: the error reaches
    the caller and the pool that made w0's call is shut down, its work dropped."""
    before = set(threading.enumerate())
    provider, run_fork = _fork_w0(4, monkeypatch,
                                  hash_error=RuntimeError("the opening could not be built"))
    with pytest.raises(RuntimeError, match="could not be built"):
        run_fork()
    assert provider.began_before_opening is True  # w0 was calling before the opening
    assert set(threading.enumerate()) <= before  # its pool's threads are gone


def test_a_crash_while_the_opening_is_stored_beside_the_first_call_pays_only_that_call_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The opening stored beside w0's call: if the process dies after the call completed
    and before that transaction commits, the fork has no log, so it is started again (as
    the runs layer does with a fork that recorded nothing) and w0's call is paid a second
    time — nothing else. In place (width 1) the opening is stored before the call."""
    twice = []
    for width in (1, 4):
        def crashing(original: Any, provider: OpeningProvider, _width: int = width) -> Any:
            crashed: list[str] = []

            def append(run_id: str, events: Any, *args: Any, **kwargs: Any) -> Any:
                if not crashed and any(e.type == "run.forked" for e in events):
                    crashed.append(run_id)
                    if _width > 1:  # beside w0's call: dies once that call has been paid
                        assert provider.w0_paid.wait(timeout=10)
                    raise Crash
                return original(run_id, events, *args, **kwargs)
            return append

        provider, run_fork = _fork_w0(width, monkeypatch, crashing)
        with pytest.raises(Crash):
            run_fork()
        result = run_fork()  # nothing was stored: started again
        assert result.state.status == "completed", result.state.error
        twice.append(sorted(n for n, count in provider.paid.items() if count > 1))
        tail = result.state.executions[result.state.fork.prefix_executions:]
        w0 = next(ex for ex in tail if ex.node == "w0")
        w0_hashes = {a.request_hash for a in w0.actions if hasattr(a, "request_hash")}
        assert set(twice[-1]) <= w0_hashes
        monkeypatch.undo()
    assert twice[0] == [] and len(twice[1]) == 1


def _released_flight() -> tuple[Any, Any]:
    """A scheduler and a head flight waiting at its flush point (a call's request drained)."""
    from types import SimpleNamespace

    from forklab.engine.oracle import NodeCall
    from forklab.engine.scheduler import Flight, Scheduler

    scheduler = Scheduler(SimpleNamespace(graph=SimpleNamespace(nodes=[]), oracle=None), 4)
    call = NodeCall(node="w0", kind="agent", occurrence=1, iteration=1, fingerprint="f",
                    reads={})
    flight = Flight(node=None, call=call, tainted=frozenset(), started_at=None, head=True,
                    emitted=2, drained=2, waiting=True)
    return scheduler, flight


def test_a_released_flight_reaches_its_call_before_the_runner_goes_on() -> None:
    """Once its request is stored, the runner waits for the head flight to leave its flush
    point: a runner that went straight on to its walks would hold the GIL, and the woken
    worker would wait out the switch interval (5 ms) before it could make its call."""
    scheduler, flight = _released_flight()
    returned = threading.Event()
    runner = threading.Thread(target=lambda: (scheduler.made_durable(flight), returned.set()))
    runner.start()
    assert not returned.wait(timeout=0.2)  # blocked: the flight has not left
    assert flight.durable == 2 and not flight.waiting  # yet released
    with scheduler.cond:
        flight.departed += 1  # what the flight's flush point does as it leaves
        scheduler.cond.notify_all()
    assert returned.wait(timeout=10)
    runner.join()


def test_a_flight_at_its_next_flush_point_since_the_drain_is_released_once_that_is_stored(
) -> None:
    """A head stored beside its first call, with more calls to make (a node with roles):
    between the runner's drain and ``made_durable`` its first call may come back and it
    may reach its next flush point, with events the runner has not taken. It is not
    released for them: it stays waiting until the runner's next drain has stored them.
    Released on the stale drain, it waited for them forever and the runner for its
    departure (found by the nightly property profile: a fork of a fork hung)."""
    scheduler, flight = _released_flight()
    flight.waiting, flight.stores_beside, flight.called_out = False, True, True
    durable = scheduler._durable(flight)

    def second_call() -> None:
        with scheduler.cond:  # its first call's answer and its next request, buffered
            flight.events.append((object, {}, None))
            flight.emitted += 1
        with contextlib.suppress(Cancelled):  # stopped, when the test has failed
            durable()  # its next flush point: waits until they are stored

    worker = threading.Thread(target=second_call, daemon=True)
    runner: threading.Thread | None = None
    try:
        worker.start()
        with scheduler.cond:  # it waits at its flush point now, its events not drained
            assert scheduler.cond.wait_for(lambda: flight.waiting, timeout=10)
        runner = threading.Thread(target=scheduler.made_durable, args=(flight,), daemon=True)
        runner.start()  # the runner's call for the drain before those events
        runner.join(timeout=10)
        assert not runner.is_alive(), "made_durable waited for a flight it did not release"
        assert flight.waiting and flight.departed == 0  # its events are still to be stored

        events, done, waiting = scheduler.drain(flight)  # the runner's next drain
        assert (len(events), done, waiting) == (1, False, True)
        scheduler.made_durable(flight)  # stored now: released, and it leaves for its call
        worker.join(timeout=10)
        assert not worker.is_alive() and flight.departed == 1 and not flight.waiting
    finally:
        scheduler.stop.set()
        with scheduler.cond:
            scheduler.cond.notify_all()


def test_storing_beside_a_flight_already_in_its_call_does_not_wait_for_it() -> None:
    scheduler, flight = _released_flight()
    flight.waiting = False  # it called on without waiting (its batch stored beside)
    scheduler.made_durable(flight)  # returns at once: the flight is not at a flush point
    assert flight.durable == 2


def test_the_batch_beside_a_call_is_stored_once_the_flight_has_left_for_it() -> None:
    """A join after a served burst prepares its request while the runner would encode the
    burst's events: the runner lets it leave for its call first (the encoding holds the GIL
    for milliseconds), then stores the batch during the call."""
    scheduler, flight = _released_flight()
    flight.waiting, flight.eager, flight.emitted, flight.drained = False, True, 1, 1
    ctx_durable = scheduler._durable(flight)
    returned = threading.Event()
    runner = threading.Thread(target=lambda: (scheduler.await_first_call(flight),
                                              returned.set()))
    runner.start()
    assert not returned.wait(timeout=0.2)  # the flight has not reached its call yet
    ctx_durable()  # its flush point: eager, it goes on to call without waiting
    assert returned.wait(timeout=10)
    runner.join()
    assert flight.called_out and not flight.eager


def test_the_store_is_given_its_upkeep_while_the_runner_waits_on_a_call() -> None:
    """A runner with nothing to do until a node on the pool answers lets the store do its
    deferred upkeep then (``idle``: SQLite checkpoints its WAL), not after the run: w0's
    call waits until the store was given it."""
    base = run_recorded(wide_fanout(12), {"task": "t"}, env=env(OverlapProvider(None), ids="base"))
    provider = WaitingProvider()
    base.env = env(provider, max_concurrency=4, ids="fork")
    base.store.idle = provider.ready.set  # type: ignore[attr-defined]
    result = fork(base, at={"before_node": "w0"}, policy={"memoize": True},
                  change={"kind": "prompt", "target": "w0", "system_prompt": "worker w0, anew"})
    assert result.state.status == "completed", result.state.error
    assert provider.waited is True
