"""A fork's ``run.forked`` row in the Django store keeps its prefix and its graph by
reference (``forklab.runs.forked_rows``), and nothing that reads the fork can tell:

- every scenario's fork, at every point: the row holds no prefix copy (and, on SQLite, no
  graph copy), and the event read back is the one the engine appended, field for field;
- the API's event page, the stream's page and the dashboard's backlog show the payload the
  engine wrote; the fork's prefix memory and input and its graph read the same;
- deleting the base (the use case, or a plain ORM delete), or the middle run of a fork of a
  fork, first copies the prefix into the forks that referenced it: they read the same after.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from forklab.engine import fork, fork_points
from forklab.engine.canonical import canonical_equals
from forklab.engine.events import Event as EngineEvent
from forklab.engine.events import RunForked
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import run_recorded
from forklab.engine.scenarios import SCENARIOS
from forklab.runs import forked_rows, queries, services, streams
from forklab.runs.models import Event, Membership, Project, Role, Run
from forklab.runs.serializers_json import event_to_json
from forklab.runs.store import DjangoStore

pytestmark = pytest.mark.django_db(transaction=True)


def approve(_: Any) -> HumanAnswer:
    return HumanAnswer(decision="approved")


def record(store: DjangoStore, name: str) -> Any:
    scenario = SCENARIOS[name]
    return run_recorded(scenario.graph(), scenario.input, store=store,
                        hitl=approve if scenario.hitl_decision else None)


def forked_as_appended(base: str, store: DjangoStore, **options: Any) -> tuple[Any, RunForked]:
    """A fork of ``base`` into ``store`` and its ``run.forked`` event as the engine made it."""
    seen: list[EngineEvent] = []
    result = fork(base, store=store, on_event=seen.append, hitl=approve, ignore_budget=True,
                  **options)
    appended = next(e for e in seen if isinstance(e, RunForked))
    return result, appended


def row_payload(run_id: str) -> dict[str, Any]:
    payload: dict[str, Any] = Event.objects.get(run_id=run_id, type="run.forked").payload
    return payload


def read_forked(store: DjangoStore, run_id: str) -> RunForked:
    return next(e for e in store.read(run_id) if isinstance(e, RunForked))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenarios_fork_at_every_point_reads_back_what_was_appended(name: str) -> None:
    store = DjangoStore()
    base = record(store, name)
    for point in fork_points(base.event_log):
        result, appended = forked_as_appended(base.run_id, store, at={"sequence": point.seq},
                                              policy={"memoize": True})
        stored = row_payload(result.run_id)
        assert "prefix_state" not in stored, point.label  # the base's log is whole here
        assert "graph" not in stored and "graph_delta" in stored
        assert canonical_equals(read_forked(store, result.run_id).to_wire(),
                                appended.to_wire()), point.label


@pytest.fixture
def member() -> Any:
    user = get_user_model().objects.create_user("admin")
    Membership.objects.create(user=user, project=DjangoStore().project, role=Role.ADMIN)
    return user


def shown(run: Run) -> dict[str, Any]:
    """The ``run.forked`` payload as the API, the stream and the dashboard show it."""
    api = next(e for e in queries.list_events(run) if e["type"] == "run.forked")["payload"]
    stream = next(e for e in streams.read_page(run.id, 0).events
                  if e["type"] == "run.forked")["payload"]
    backlog = event_to_json(Event.objects.get(run_id=run.id, type="run.forked"))["payload"]
    assert canonical_equals(api, stream) and canonical_equals(api, backlog)
    return api


def views(run_id: str) -> dict[str, Any]:
    run = Run.objects.get(pk=run_id)
    prefix = queries.fork_prefix(run_id)
    return {"shown": shown(run), "memory": prefix.memory, "input": prefix.input,
            "graph": queries.graph_of(run).to_wire(),
            "events": [e.to_wire() for e in DjangoStore().read(run_id)]}


@pytest.mark.parametrize("how", ["use case", "orm"])
def test_a_fork_reads_the_same_after_its_base_is_deleted(member: Any, how: str) -> None:
    store = DjangoStore()
    base = record(store, "research-write")
    result, appended = forked_as_appended(base.run_id, store, at="before:write#1",
                                          change={"kind": "prompt", "target": "write",
                                                  "system_prompt": "Say it differently."})
    before = views(result.run_id)
    assert canonical_equals(before["shown"], appended.payload())
    assert before["memory"] == appended.prefix_state["memory"]

    if how == "use case":
        services.delete_run(user=member, run_id=base.run_id)
    else:
        Run.objects.filter(pk=base.run_id).delete()
    assert not Event.objects.filter(run_id=base.run_id).exists()
    assert "prefix_state" in row_payload(result.run_id)  # copied in before the delete
    forked_rows.clear_caches()  # read as a fresh process would
    assert canonical_equals(views(result.run_id), before)


def test_a_fork_of_a_fork_reads_the_same_after_the_middle_run_is_deleted() -> None:
    store = DjangoStore()
    base = record(store, "research-write")
    first, _ = forked_as_appended(base.run_id, store, at="before:write#1",
                                  change={"kind": "prompt", "target": "write",
                                          "system_prompt": "Say it differently."})
    second, appended = forked_as_appended(first.run_id, store, at="before:write#1",
                                          change={"kind": "model", "target": "write",
                                                  "model": "scripted-small"})
    assert appended.prefix_ref["run_id"] == first.run_id  # the middle run's own log
    before = views(second.run_id)
    Run.objects.filter(pk=first.run_id).delete()
    assert "prefix_state" in row_payload(second.run_id)
    forked_rows.clear_caches()
    assert canonical_equals(views(second.run_id), before)
    assert canonical_equals(read_forked(store, second.run_id).to_wire(), appended.to_wire())


def test_deleting_a_project_with_its_runs_and_their_forks_leaves_nothing() -> None:
    project = Project.objects.create(slug="gone", name="Gone")
    store = DjangoStore(project)
    base = record(store, "research-write")
    forked_as_appended(base.run_id, store, at="before:write#1")
    project.delete()
    assert not Run.objects.filter(project__slug="gone").exists()
    assert not Event.objects.filter(run_id=base.run_id).exists()


def test_a_graph_version_row_id_handed_out_again_is_never_taken_for_the_old_version() -> None:
    """A flushed or restored database starts row ids over: the delta of a fork's graph must
    be made against the version the row holds now, not one cached under the same id (here
    the old version's prompt is the one the fork sets: against the old spec the delta would
    leave it out, and the next process would read the new spec's prompt)."""
    from forklab.runs.models import Graph, GraphVersion

    store = DjangoStore()
    scenario = SCENARIOS["research-write"]
    original = scenario.graph()
    first = run_recorded(original, scenario.input, store=store)
    forked_as_appended(first.run_id, store, at="before:write#1")  # caches its version's row
    pk = GraphVersion.objects.get(graph__graph_id=original.id).pk
    prompt = original.node("write").prompt
    Run.objects.all().delete()
    Graph.objects.all().delete()  # the version goes; its id is handed out again below
    edited = original.model_copy(update={"nodes": [
        n.model_copy(update={"prompt": prompt + " Other."}) if n.id == "write" else n
        for n in original.nodes]})
    store.save_graph(edited)
    GraphVersion.objects.filter(graph__graph_id=edited.id).update(id=pk)
    base = run_recorded(edited, scenario.input, store=store)
    result, appended = forked_as_appended(
        base.run_id, store, at="before:write#1",
        change={"kind": "config", "node": "write", "patch": {"prompt": prompt}})
    forked_rows.clear_caches()  # read as the next process would
    assert canonical_equals(read_forked(store, result.run_id).to_wire(), appended.to_wire())


def test_forking_a_fork_at_a_point_of_its_deleted_base_says_the_base_was_deleted() -> None:
    store = DjangoStore()
    base = record(store, "research-write")
    result, _ = forked_as_appended(base.run_id, store, at="before:write#1",
                                   change={"kind": "prompt", "target": "write",
                                           "system_prompt": "Say it differently."})
    Run.objects.filter(pk=base.run_id).delete()

    from forklab.engine.errors import SourceMissing

    with pytest.raises(SourceMissing) as raised:
        fork(result.run_id, store=store, at="start", dry_run=True)

    assert f"run {base.run_id!r}, which was deleted" in raised.value.message
    assert "archived" not in raised.value.message
    earliest = raised.value.context["earliest_forkable"]
    assert earliest == fork_points(store.read(result.run_id), store=store)[0].seq
    assert fork(result.run_id, store=store, at={"sequence": earliest}, dry_run=True)
