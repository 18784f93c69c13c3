"""The Django store: the engine's store contract on SQLite and PostgreSQL, plus the run-row
projection it maintains."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.db import connections

from forklab.engine.canonical import canonical_equals
from forklab.engine.errors import EventGapError, SeqConflictError
from forklab.engine.events import AgentResponded, RunForked, RunStarted
from forklab.engine.fork.continuing import answer_run
from forklab.engine.fork.diff import incurred_usd
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import run_recorded
from forklab.engine.reducers import fold
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.store import Store
from forklab.runs.models import Event, FinalState, Project, Run, UsageRecord
from forklab.runs.store import DjangoStore
from tests.engine.store_contract import StoreContract, started, written


@pytest.mark.django_db(transaction=True)  # the concurrency test appends from threads
class TestDjangoStoreOnSQLite(StoreContract):
    def make_store(self) -> Store:
        return DjangoStore()

    def thread_done(self) -> None:
        connections.close_all()


@pytest.mark.postgres
@pytest.mark.django_db(databases=["default", "pg"], transaction=True)
class TestDjangoStoreOnPostgreSQL(StoreContract):
    reorders_keys = True  # jsonb

    def make_store(self) -> Store:
        assert connections["pg"].vendor == "postgresql"
        return DjangoStore(using="pg")

    def thread_done(self) -> None:
        connections.close_all()


def record(name: str, store: DjangoStore, *, answer: bool = True) -> Any:
    scenario = SCENARIOS[name]
    decision = scenario.hitl_decision if answer else None
    hitl = (lambda _q: HumanAnswer(decision=decision)) if decision else None
    return run_recorded(scenario.graph(), scenario.input, store=store, hitl=hitl)


def assert_row_matches_state(run: Run, store: DjangoStore) -> None:
    state = fold(store.read(run.id))
    assert run.status == state.status
    assert run.last_seq == state.version
    assert canonical_equals(run.memory, state.memory)
    assert canonical_equals(run.path, state.path())
    assert canonical_equals(run.input, state.input)
    assert run.input_tokens == state.input_tokens
    assert run.output_tokens == state.output_tokens
    assert float(run.cost_usd) == pytest.approx(state.cost_usd, abs=1e-9)
    assert canonical_equals(run.error, state.error)
    assert run.graph_slug == state.graph_id
    assert run.graph_version_number == state.graph_version


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_append_keeps_the_run_row_equal_to_the_folded_log(name: str) -> None:
    store = DjangoStore()
    recorded = record(name, store)
    run = Run.objects.get(pk=recorded.run_id)
    assert_row_matches_state(run, store)
    assert run.project.slug == "default"
    assert run.graph_version is not None
    assert run.graph_version.version == recorded.state.graph_version
    assert (run.finished_at is not None) == recorded.state.finished


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_finished_runs_final_state_row_equals_its_folded_log(name: str) -> None:
    store = DjangoStore()
    recorded = record(name, store)
    final = FinalState.objects.get(run_id=recorded.run_id)
    assert final.version == recorded.state.version
    assert canonical_equals(final.state, fold(store.read(recorded.run_id)).to_wire())


@pytest.mark.django_db
def test_usage_records_mirror_every_agent_response() -> None:
    store = DjangoStore()
    recorded = record("panel-vote", store)
    responses = [e for e in store.read(recorded.run_id) if isinstance(e, AgentResponded)]
    usage = list(UsageRecord.objects.filter(run_id=recorded.run_id).order_by("seq"))
    assert [u.seq for u in usage] == [e.seq for e in responses]
    assert {u.role for u in usage} >= {"judge", "voters[0]", "voters[2]"}
    total = sum((u.cost_usd for u in usage if u.cost_usd is not None), Decimal(0))
    assert float(total) == pytest.approx(recorded.state.cost_usd, abs=1e-9)
    run = Run.objects.get(pk=recorded.run_id)
    assert float(run.incurred_cost_usd) == pytest.approx(recorded.state.cost_usd, abs=1e-9)


@pytest.mark.django_db(transaction=True)  # on_commit must fire to install the cache
def test_appending_does_not_refold_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    store = DjangoStore()
    reads: list[tuple[int, int | None]] = []
    original = store.read

    def counting_read(run_id: str, *, after: int = 0, upto: int | None = None) -> Any:
        reads.append((after, upto))
        return original(run_id, after=after, upto=upto)

    monkeypatch.setattr(store, "read", counting_read)
    recorded = record("review-loop", store)
    assert recorded.state.version > 10
    assert reads == []


@pytest.mark.django_db(transaction=True)
def test_a_fresh_store_rebuilds_from_the_newest_snapshot() -> None:
    first = DjangoStore()
    recorded = record("order-fulfilment", first, answer=False)  # pauses at the approval gate
    assert Run.objects.get(pk=recorded.run_id).status == "paused"
    snapshot = fold(first.read(recorded.run_id))
    first.save_snapshot(recorded.run_id, snapshot)

    second = DjangoStore()
    reads: list[int] = []
    original = second.read
    second.read = lambda run_id, *, after=0, upto=None: (  # type: ignore[method-assign]
        reads.append(after) or original(run_id, after=after, upto=upto))
    answer_run(recorded.run_id, HumanAnswer(decision="approved"), store=second)
    assert reads and all(after >= snapshot.version for after in reads[1:])
    run = Run.objects.get(pk=recorded.run_id)
    assert run.status == "completed"
    assert_row_matches_state(run, second)


@pytest.mark.django_db
def test_a_row_inserted_behind_the_lock_surfaces_as_a_seq_conflict() -> None:
    store = DjangoStore()
    store.append("r1", [started()], expected_seq=0)
    # Someone wrote seq 2 without going through the store (so last_seq still says 1).
    Event.objects.create(run_id="r1", seq=2, type="memory.written", payload={},
                         at="2026-01-01T00:00:00Z", timestamp=0.0)
    with pytest.raises(SeqConflictError):
        store.append("r1", [written("r1", 2)], expected_seq=1)
    assert Event.objects.filter(run_id="r1").count() == 2
    assert Run.objects.get(pk="r1").last_seq == 1


@pytest.mark.django_db
def test_a_failed_append_leaves_the_run_row_untouched() -> None:
    store = DjangoStore()
    store.append("r1", [started(), written("r1", 2, "k", "v")], expected_seq=0)
    before = Run.objects.get(pk="r1")
    with pytest.raises(EventGapError):
        store.append("r1", [written("r1", 3, "k", "w"), written("r1", 5)], expected_seq=2)
    after = Run.objects.get(pk="r1")
    assert (after.last_seq, after.memory) == (before.last_seq, before.memory) == (2, {"goal": "x", "k": "v"})


@pytest.mark.django_db
def test_a_fork_records_its_lineage_on_the_run_row() -> None:
    store = DjangoStore(Project.objects.create(slug="team", name="Team"))
    base = record("research-write", store)
    prefix = fold(store.read(base.run_id, upto=base.state.executions[1].start_seq - 1))
    changes = [{"kind": "prompt", "target": "write", "system_prompt": "Be brief."}]
    store.append("fork1", [
        RunStarted(run_id="fork1", seq=1, at=10.0, graph_id=base.state.graph_id,
                   graph_version=base.state.graph_version, graph_hash=base.state.graph_hash,
                   input=base.state.input, start="research", run_kind="counterfactual",
                   label="brief", parent_run_id=base.run_id),
        RunForked(run_id="fork1", seq=2, at=10.1, base_run_id=base.run_id,
                  fork_sequence_id=prefix.version, fork_node_id="write",
                  prefix_state=prefix.to_wire(), changes=changes, fork_group_id="g1",
                  graph=base.graph.to_wire()),
    ], expected_seq=0)
    fork = Run.objects.get(pk="fork1")
    assert fork.project.slug == "team"
    assert fork.run_kind == "counterfactual"
    assert fork.parent_run_id == base.run_id
    assert (fork.fork_sequence_id, fork.fork_node_id, fork.fork_group_id) == (
        prefix.version, "write", "g1")
    assert fork.fork_mutations == changes
    assert canonical_equals(fork.memory, prefix.memory)
    # The prefix's spend is inherited in the totals, but this run paid nothing itself.
    assert float(fork.cost_usd) == pytest.approx(prefix.cost_usd, abs=1e-9) and prefix.cost_usd > 0
    assert fork.incurred_cost_usd == 0
    assert incurred_usd(fold(store.read("fork1"))) == 0
    assert list(Run.objects.get(pk=base.run_id).children.all()) == [fork]


@pytest.mark.django_db
def test_a_fork_without_an_explicit_project_joins_its_base_runs_project() -> None:
    team = Project.objects.create(slug="team", name="Team")
    base = record("diamond", DjangoStore(team))
    DjangoStore().append("child", [
        RunStarted(run_id="child", seq=1, at=1.0, graph_id="diamond", graph_version=1,
                   graph_hash="h", input={}, start="plan", run_kind="counterfactual",
                   parent_run_id=base.run_id),
    ], expected_seq=0)
    assert Run.objects.get(pk="child").project == team


@pytest.mark.django_db
def test_graphs_are_scoped_to_the_stores_project() -> None:
    graph = SCENARIOS["diamond"].graph()
    a = DjangoStore(Project.objects.create(slug="a", name="A"))
    b = DjangoStore(Project.objects.create(slug="b", name="B"))
    assert a.save_graph(graph) == 1
    assert b.graph_versions("diamond") == []
    assert b.save_graph(graph) == 1


@pytest.mark.django_db
def test_archiving_keeps_the_run_row_and_refuses_further_appends() -> None:
    store = DjangoStore()
    store.append("r1", [started(), written("r1", 2)], expected_seq=0)
    store.archive("r1")
    run = Run.objects.get(pk="r1")
    assert run.archived and run.last_seq == 2
    with pytest.raises(EventGapError):
        DjangoStore().append("r1", [written("r1", 3)], expected_seq=2)


@pytest.mark.django_db
def test_a_fork_through_the_engine_lands_with_lineage_and_its_own_spend() -> None:
    from forklab.engine.fork import change, fork

    store = DjangoStore(Project.objects.create(slug="team", name="Team"))
    base = record("research-write", store)
    result = fork(base.run_id, at={"before_node": "write"}, store=store, label="brief",
                  change=change.prompt("write", "Be brief."))
    row = Run.objects.get(pk=result.run_id)
    assert (row.run_kind, row.parent_run_id, row.label) == ("counterfactual", base.run_id, "brief")
    assert (row.fork_sequence_id, row.fork_node_id) == (result.fork_sequence_id, "write")
    assert row.fork_mutations == [{"kind": "prompt", "target": "write",
                                   "system_prompt": "Be brief."}]
    assert float(row.incurred_cost_usd) == pytest.approx(result.incurred_cost_usd, abs=1e-9)
    assert row.cost_usd > row.incurred_cost_usd  # the prefix's spend is inherited
    assert_row_matches_state(row, store)


@pytest.mark.django_db
def test_deleting_a_project_takes_its_graphs_runs_and_events_with_it() -> None:
    project = Project.objects.create(slug="gone", name="Gone")
    recorded = record("diamond", DjangoStore(project))
    project.delete()
    assert not Run.objects.filter(pk=recorded.run_id).exists()
    assert not Event.objects.filter(run_id=recorded.run_id).exists()
