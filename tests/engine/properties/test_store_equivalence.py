"""The SQLite store answers every sequence of store operations as the memory store does.

A Hypothesis state machine drives both with the same operations on a few runs — appends
(at the right seq, or one off: both refuse alike), reads with bounds anywhere (negative,
inside, far past the log), snapshots with compaction, archives, and closing and reopening
the SQLite file (its ordinal cache starts empty, its keys must still find each log) — and
compares every answer. The memory store is the reference: a list per run. What the
example-based contract suite checks one case at a time, this checks over interleavings
no one wrote down (two runs' keys side by side, a compacted run appended to again, a
reopened file read before it is written).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from forklab.engine.errors import EventGapError, RunNotFound
from forklab.engine.reducers import fold
from forklab.engine.sqlite_store import SqliteStore
from forklab.engine.store import MemoryStore
from tests.engine.properties.profiles import _PARENT, SCALE
from tests.engine.store_contract import started, written

RUNS = ("r1", "r2", "r3")
VALUES = st.one_of(st.integers(-10, 10), st.text(max_size=8),
                   st.lists(st.integers(0, 3), max_size=3))
BOUNDS = st.one_of(st.integers(-3, 12), st.just(2**32 - 1), st.just(2**40))


def _wire(events: list[Any]) -> list[dict[str, Any]]:
    return [e.to_wire() for e in events]


class SqliteMatchesMemory(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp())
        self.sqlite = SqliteStore(self.directory / "s.sqlite3")
        self.memory = MemoryStore()
        self.whole: set[str] = set()  # runs whose log still starts at seq 1 (foldable)
        self.known: set[str] = set()

    def teardown(self) -> None:
        self.sqlite.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _both(self, call: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """Each store's answer, or the class of what it raised."""
        answers = []
        for store in (self.sqlite, self.memory):
            try:
                answers.append(getattr(store, call)(*args, **kwargs))
            except (EventGapError, RunNotFound) as error:
                answers.append(type(error))
        return answers[0], answers[1]

    @rule(run=st.sampled_from(RUNS), values=st.lists(VALUES, max_size=4),
          off=st.sampled_from([0, 0, 0, -1, 1]))
    def append(self, run: str, values: list[Any], off: int) -> None:
        last = self.memory.last_seq(run)
        first = last + 1
        events: list[Any] = [started(run)] if first == 1 and values else []
        seq = first + len(events)
        events += [written(run, seq + i, value=v) for i, v in enumerate(
            values[len(events):] if events else values)]
        got_sqlite, got_memory = self._both("append", run, events,
                                            expected_seq=max(0, last + off))
        assert got_sqlite == got_memory
        if got_memory is None and events:
            self.known.add(run)
            if first == 1:
                self.whole.add(run)

    @rule(run=st.sampled_from(RUNS), after=BOUNDS, upto=st.one_of(st.none(), BOUNDS))
    def read(self, run: str, after: int, upto: int | None) -> None:
        got_sqlite, got_memory = self._both("read", run, after=after, upto=upto)
        assert _wire(got_sqlite) == _wire(got_memory)

    @precondition(lambda self: bool(self.whole))
    @rule(data=st.data())
    def snapshot_and_compact(self, data: st.DataObject) -> None:
        run = data.draw(st.sampled_from(sorted(self.whole)))
        state = fold(self.memory.read(run))
        self.sqlite.save_snapshot(run, state)
        self.memory.save_snapshot(run, state)
        upto = data.draw(st.integers(0, state.version))
        self._both("compact", run, upto)
        if upto:
            self.whole.discard(run)

    @precondition(lambda self: bool(self.known))
    @rule(data=st.data())
    def archive(self, data: st.DataObject) -> None:
        run = data.draw(st.sampled_from(sorted(self.known)))
        self._both("archive", run)
        self.whole.discard(run)

    @rule()
    def reopen(self) -> None:
        self.sqlite.close()
        self.sqlite = SqliteStore(self.directory / "s.sqlite3")

    @invariant()
    def same_answers(self) -> None:
        assert self.sqlite.run_ids() == [r for r in self.memory.run_ids() if r in self.known]
        for run in RUNS:
            assert self.sqlite.last_seq(run) == self.memory.last_seq(run), run
            assert self.sqlite.first_seq(run) == self.memory.first_seq(run), run
            assert _wire(self.sqlite.read(run)) == _wire(self.memory.read(run)), run


SqliteMatchesMemory.TestCase.settings = settings(
    _PARENT, max_examples=40 * SCALE, stateful_step_count=30)
TestSqliteMatchesMemory = SqliteMatchesMemory.TestCase
