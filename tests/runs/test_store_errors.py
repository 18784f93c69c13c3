"""What the Django store reports when the database refuses an append: a race is
``seq_conflict``; anything else — a value the database cannot hold, a failed constraint — is
``store_rejected``, never a false "lost a race". Nothing is appended either way, and the store
keeps working. (The edges refuse such values earlier, as ``invalid_input``; this is the
backstop for whatever gets past them, on SQLite and on PostgreSQL.)
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections

from forklab.engine.errors import SeqConflictError, StoreRejected
from forklab.engine.events import MemoryWritten, NodeStarted
from forklab.runs.models import Event, Run
from forklab.runs.store import DjangoStore
from tests.engine.store_contract import started, written


class Refusals:
    alias = "default"

    def store(self) -> DjangoStore:
        return DjangoStore(using=self.alias)

    def assert_refused(self, store: DjangoStore, event: Any) -> None:
        with pytest.raises(StoreRejected) as caught:
            store.append("r1", [event], expected_seq=1)
        assert "refused to store events 2..2" in caught.value.message
        assert "seq_conflict" not in caught.value.message
        events = Event.objects.using(self.alias)
        assert list(events.filter(run_id="r1").values_list("seq", flat=True)) == [1]
        assert Run.objects.using(self.alias).get(pk="r1").last_seq == 1
        store.append("r1", [written("r1", 2)], expected_seq=1)  # still works afterwards
        assert Run.objects.using(self.alias).get(pk="r1").last_seq == 2

    def test_a_non_finite_number_is_store_rejected_not_a_race(self) -> None:
        store = self.store()
        store.append("r1", [started()], expected_seq=0)
        self.assert_refused(store, MemoryWritten(run_id="r1", seq=2, at=2.0, key="k",
                                                 value=float("nan")))

    def test_a_real_race_is_still_a_seq_conflict(self) -> None:
        store = self.store()
        store.append("r1", [started()], expected_seq=0)
        store.append("r1", [written("r1", 2)], expected_seq=1)
        with pytest.raises(SeqConflictError):
            self.store().append("r1", [written("r1", 2, "other")], expected_seq=1)


@pytest.mark.django_db
class TestRefusalsOnSQLite(Refusals):
    pass


@pytest.mark.postgres
@pytest.mark.django_db(databases=["default", "pg"])
class TestRefusalsOnPostgreSQL(Refusals):
    alias = "pg"

    def store(self) -> DjangoStore:
        assert connections["pg"].vendor == "postgresql"
        return super().store()

    def test_a_nul_in_a_payload_is_store_rejected(self) -> None:
        store = self.store()
        store.append("r1", [started()], expected_seq=0)
        self.assert_refused(store, MemoryWritten(run_id="r1", seq=2, at=2.0, key="k",
                                                 value="a\x00b"))

    def test_a_nul_in_a_column_is_store_rejected(self) -> None:
        store = self.store()
        store.append("r1", [started()], expected_seq=0)
        self.assert_refused(store, NodeStarted(
            run_id="r1", seq=2, at=2.0, node="a\x00", occurrence=1, iteration=1,
            kind="agent", fingerprint="f", reads={}))
