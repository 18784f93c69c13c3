"""A fork's ``FinalState`` row keeps its inherited executions and calls by reference to its
base's row (``forklab.runs.final_states``), and nothing that reads it can tell:

- for generated graphs, changes and points, memoize on or off, forks of forks included, on
  SQLite and PostgreSQL: the row read back (caches cleared) is the fork's folded log, and a
  fork that inherited executions keeps at least those by reference;
- deleting the base (the use case, or a plain ORM delete), or the middle run of a fork of a
  fork, or rewriting the base's row, first writes its dependents whole: they read the same;
- compacting or archiving the base keeps its row, so its forks still read from it;
- a row whose base's row changed behind the store's back is a miss, never a wrong state:
  ``load`` says None and the readers fold the log instead.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from hypothesis import given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points
from forklab.engine.canonical import canonical_equals
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import run_recorded
from forklab.engine.reducers import fold
from forklab.engine.scenarios import SCENARIOS
from forklab.runs import final_states, forked_rows, readcache, services
from forklab.runs.models import FinalState, Membership, Project, Role, Run
from forklab.runs.store import DjangoStore
from tests.engine.properties.changes import changes
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import Harness, hitl

DATABASES = [
    pytest.param("default", id="sqlite", marks=pytest.mark.django_db(transaction=True)),
    pytest.param("pg", id="postgres", marks=[
        pytest.mark.postgres, pytest.mark.django_db(databases=["default", "pg"],
                                                    transaction=True)]),
]
PROMPT = {"kind": "prompt", "target": "write", "system_prompt": "Say it differently."}


def approve(_: Any) -> HumanAnswer:
    return HumanAnswer(decision="approved")


def store_in(using: str) -> DjangoStore:
    return DjangoStore(using=using)


def record(store: DjangoStore, name: str = "research-write") -> Any:
    scenario = SCENARIOS[name]
    return run_recorded(scenario.graph(), scenario.input, store=store,
                        hitl=approve if scenario.hitl_decision else None)


def stored(run_id: str, using: str = "default") -> dict[str, Any] | None:
    state = FinalState.objects.using(using).filter(run_id=run_id).values_list("state", flat=True)
    return state.first()


def read_back(store: DjangoStore, run_id: str) -> dict[str, Any]:
    """The row as a fresh process reads it; it must equal the run's folded log."""
    final_states.clear_caches()
    loaded = store.load_final_state(run_id)
    assert loaded is not None
    wire = loaded.to_wire()
    assert canonical_equals(wire, fold(store.read(run_id)).to_wire())
    return wire


def assert_compact_row_holds(store: DjangoStore, result: Any) -> None:
    """The fork's row reads back as its state; it keeps by reference at least what the
    fork inherited when its base has a row."""
    wire = read_back(store, result.run_id)
    assert canonical_equals(wire, result.state.to_wire())
    base = result.state.fork.base_run_id
    if result.state.prefix_executions and stored(base, store.using) is not None:
        ref = (stored(result.run_id, store.using) or {})[final_states.INHERITED]
        assert ref["run_id"] == base
        assert ref["executions"] >= result.state.prefix_executions
        assert ref["calls"] >= result.state.tail_from_call


@pytest.mark.parametrize("using", DATABASES)
@examples(12)
@given(case=graph_cases(), data=st.data())
def test_a_forks_row_reads_back_as_its_folded_log(using: str, case: Any,
                                                  data: st.DataObject) -> None:
    h = Harness()  # its run ids start again at run-0001: start from an empty database
    Run.objects.using(using).all().delete()
    for clear in (final_states.clear_caches, forked_rows.clear_caches):
        clear()
    store = store_in(using)
    base = record_case(case, h, store=store)
    item = data.draw(st.one_of(st.none(), changes(case.graph, base.state)), label="change")
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    memoize = data.draw(st.booleans(), label="memoize")
    first = fork(base.run_id, store=store, at={"sequence": point.seq}, change=item, hitl=hitl,
                 ignore_budget=True, policy={"memoize": memoize}, env=h.env)
    if first.state is None or not first.state.finished:
        return
    assert_compact_row_holds(store, first)
    again = data.draw(st.sampled_from(fork_points(first.event_log)), label="point of the fork")
    second = fork(first.run_id, at=f"seq:{again.seq}@{again.run_id}", store=store, env=h.env,
                  hitl=hitl, ignore_budget=True, policy={"memoize": memoize})
    if second.state is not None and second.state.finished:
        assert_compact_row_holds(store, second)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenarios_fork_at_every_point_reads_back_its_final_state(name: str) -> None:
    store = DjangoStore()
    base = record(store, name)
    for point in fork_points(base.event_log):
        result = fork(base.run_id, store=store, at={"sequence": point.seq}, hitl=approve,
                      ignore_budget=True, policy={"memoize": True})
        if result.state.finished:
            assert_compact_row_holds(store, result)


def test_a_forks_row_holds_only_the_items_it_does_not_share_with_its_base(db: Any) -> None:
    store = DjangoStore()
    base = record(store)
    result = fork(base.run_id, store=store, at="before:write#1", change=PROMPT)
    row, whole = stored(result.run_id) or {}, result.state.to_wire()
    ref = row[final_states.INHERITED]
    assert ref["executions"] == result.state.prefix_executions > 0
    assert len(row["executions"]) == len(whole["executions"]) - ref["executions"]
    assert len(row["calls"]) == len(whole["calls"]) - ref["calls"]
    assert len(json.dumps(row)) < len(json.dumps(whole))


@pytest.fixture
def member() -> Any:
    user = get_user_model().objects.create_user("admin")
    Membership.objects.create(user=user, project=DjangoStore().project, role=Role.ADMIN)
    return user


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", ["use case", "orm"])
def test_a_fork_reads_the_same_after_its_base_is_deleted(member: Any, how: str) -> None:
    store = DjangoStore()
    base = record(store)
    result = fork(base.run_id, store=store, at="before:write#1", change=PROMPT)
    before = read_back(store, result.run_id)
    assert FinalState.objects.get(run_id=result.run_id).base_id == base.run_id
    if how == "use case":
        services.delete_run(user=member, run_id=base.run_id)
    else:
        Run.objects.filter(pk=base.run_id).delete()
    row = FinalState.objects.get(run_id=result.run_id)
    assert row.base_id is None and final_states.INHERITED not in row.state  # written whole
    assert canonical_equals(read_back(store, result.run_id), before)


@pytest.mark.django_db(transaction=True)
def test_a_fork_of_a_fork_reads_the_same_after_the_middle_run_is_deleted() -> None:
    store = DjangoStore()
    base = record(store)
    first = fork(base.run_id, store=store, at="before:write#1", change=PROMPT)
    second = fork(first.run_id, store=store, at="before:write#1",
                  change={"kind": "model", "target": "write", "model": "scripted-small"})
    assert FinalState.objects.get(run_id=second.run_id).base_id == first.run_id
    before = read_back(store, second.run_id)
    Run.objects.filter(pk=first.run_id).delete()
    assert FinalState.objects.get(run_id=second.run_id).base_id is None
    assert canonical_equals(read_back(store, second.run_id), before)
    Project.objects.filter(pk=store.project.pk).delete()  # the rest cascades cleanly
    assert not FinalState.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", ["compact", "archive"])
def test_a_fork_still_reads_its_bases_row_after_the_base_loses_its_events(how: str) -> None:
    store = DjangoStore()
    base = record(store)
    result = fork(base.run_id, store=store, at="before:write#1", change=PROMPT)
    before = read_back(store, result.run_id)
    if how == "compact":
        store.save_snapshot(base.run_id, base.state)
        store.compact(base.run_id, base.state.version)
    else:
        store.archive(base.run_id)
    assert FinalState.objects.get(run_id=result.run_id).base_id == base.run_id
    final_states.clear_caches()
    loaded = store.load_final_state(result.run_id)
    assert loaded is not None and canonical_equals(loaded.to_wire(), before)


@pytest.mark.django_db(transaction=True)
def test_rewriting_a_bases_row_writes_its_dependents_whole_first() -> None:
    store = DjangoStore()
    base = record(store)
    result = fork(base.run_id, store=store, at="before:write#1", change=PROMPT)
    before = read_back(store, result.run_id)
    final_states.write(base.run_id, base.state, using="default")  # as a re-finish would
    row = FinalState.objects.get(run_id=result.run_id)
    assert row.base_id is None and final_states.INHERITED not in row.state
    assert canonical_equals(read_back(store, result.run_id), before)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how", ["rewritten", "gone"])
def test_a_row_whose_base_changed_behind_the_stores_back_is_a_miss_not_a_wrong_state(
        how: str) -> None:
    store = DjangoStore()
    base = record(store)
    result = fork(base.run_id, store=store, at="before:write#1", change=PROMPT)
    expected = result.state.to_wire()
    rows = FinalState.objects.filter(run_id=base.run_id)
    if how == "rewritten":
        rows.update(version=base.state.version + 1)
    else:  # as a delete racing the fork's finish would leave it (no constraint refuses it)
        rows._raw_delete(rows.db)
    final_states.clear_caches()
    assert store.load_final_state(result.run_id) is None
    readcache.clear_caches()
    run = Run.objects.get(pk=result.run_id)
    assert canonical_equals(readcache.state_at(run).to_wire(), expected)  # folded instead
