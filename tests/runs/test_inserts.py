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
