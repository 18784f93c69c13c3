"""``forklab.runs.inserts``: a row inserted with SQL built once per model is the row the ORM
would have stored, on SQLite and PostgreSQL, several rows in one call."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.db.models.signals import post_save, pre_save

from forklab.runs import inserts
from forklab.runs.models import Project, Run

DATABASES = [
    pytest.param("default", id="sqlite", marks=pytest.mark.django_db(transaction=True)),
    pytest.param("pg", id="postgres", marks=[
        pytest.mark.postgres, pytest.mark.django_db(databases=["default", "pg"],
                                                    transaction=True)]),
]


def columns(run: Run) -> dict[str, Any]:
    return {f.attname: getattr(run, f.attname) for f in Run._meta.concrete_fields}


def new_run(project: Project, run_id: str) -> Run:
    return Run(id=run_id, project=project, status="queued", label="ü ✓ 'quoted'",
               work={"task": "fork", "spec": {"nested": [1, 2.5, None, "x"]}},
               input={"goal": "ship"}, cost_usd=Decimal("0.25"), fork_mutations=[{"k": 1}])


@pytest.mark.parametrize("using", DATABASES)
def test_rows_inserted_together_read_back_as_the_orm_stores_them(using: str) -> None:
    project = Project.objects.using(using).create(slug="p", name="P")
    by_orm = new_run(project, "orm")
    by_orm.save(using=using, force_insert=True)
    first, second = new_run(project, "fast-1"), new_run(project, "fast-2")
    inserts.insert(first, second, using=using)
    assert not first._state.adding and first._state.db == using
    stored = {r.id: columns(r) for r in Run.objects.using(using).all()}
    orm = stored.pop("orm")
    assert sorted(stored) == ["fast-1", "fast-2"]
    for run_id, fast in stored.items():
        assert fast.pop("created_at") >= orm["created_at"]  # the model's default: now
        assert fast == {k: v for k, v in orm.items() if k != "created_at"} | {"id": run_id}


@pytest.mark.parametrize("using", DATABASES)
def test_a_failing_row_leaves_none_of_the_rows_of_its_transaction(using: str) -> None:
    project = Project.objects.using(using).create(slug="p", name="P")
    new_run(project, "taken").save(using=using, force_insert=True)
    with pytest.raises(IntegrityError), transaction.atomic(using=using):
        inserts.insert(new_run(project, "fresh"), new_run(project, "taken"), using=using)
    assert list(Run.objects.using(using).values_list("id", flat=True)) == ["taken"]


def test_nothing_listens_to_saves_of_the_rows_inserted_without_the_orm() -> None:
    assert not pre_save.has_listeners(Run) and not post_save.has_listeners(Run)


@pytest.mark.parametrize("using", DATABASES)
def test_rows_inserted_in_bulk_read_back_as_the_orm_stores_them(using: str) -> None:
    """``insert_values``: plain values pass through, dates, JSON and decimals are prepared
    by their field — what is read back is what ``bulk_create`` stored."""
    from datetime import UTC, datetime

    from forklab.runs.models import Event, UsageRecord

    project = Project.objects.using(using).create(slug="p", name="P")
    for run_id in ("orm", "fast"):
        Run.objects.using(using).create(id=run_id, project=project)
    when = datetime(2026, 12, 3, 12, 30, 15, 123456, tzinfo=UTC)
    payload = {"text": "ü ✓ 'quoted'", "nested": [1, 2.5, None, True], "big": 2**53}
    Event.objects.using(using).bulk_create([
        Event(run_id="orm", seq=1, type="node.completed", node="n", occurrence=1, iteration=None,
              payload=payload, at=when, timestamp=1.5, v=2)])
    UsageRecord.objects.using(using).bulk_create([
        UsageRecord(run_id="orm", seq=1, node="n", role="voters[2]", model="m", label="reused",
                    input_tokens=3, output_tokens=4, cost_usd=Decimal("0.0012"),
                    created_at=when)])
    inserts.insert_values(Event, ("run_id", "seq", "type", "node", "occurrence", "iteration",
                                  "payload", "at", "timestamp", "v"),
                          [("fast", 1, "node.completed", "n", 1, None, payload, when, 1.5, 2)],
                          using=using)
    inserts.insert_values(UsageRecord, ("run_id", "seq", "node", "role", "model", "label",
                                        "input_tokens", "output_tokens", "cost_usd",
                                        "created_at"),
                          [("fast", 1, "n", "voters[2]", "m", "reused", 3, 4, Decimal("0.0012"),
                            when)], using=using)
    for model in (Event, UsageRecord):
        rows = {r.pop("run_id"): r for r in model.objects.using(using).values()}
        for row in rows.values():
            row.pop("id")
        assert rows["fast"] == rows["orm"]


def test_a_bulk_insert_must_name_every_column() -> None:
    from forklab.runs.models import Event

    with pytest.raises(ValueError, match=r"missing \['at', 'iteration'"):
        inserts.insert_values(Event, ("run_id", "seq", "type", "node", "occurrence",
                                      "payload", "timestamp", "v"), [])
