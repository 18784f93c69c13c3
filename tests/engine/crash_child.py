"""A child process that records a scenario into a SQLite file and freezes at a chosen event.

Run as ``python -m tests.engine.crash_child DB RUN_ID SCENARIO STOP MARKER`` from the repo
root. ``STOP`` is ``TYPE:NODE:N`` — the Nth event of type ``TYPE`` inside node ``NODE``
(e.g. ``node.completed:review:1``, ``agent.responded:vote:2``). When the append holding
that event has committed (the runner appends in batches, so it may hold a few events after
it), the child writes ``MARKER`` atomically — a JSON list of the wire form of every event
it appended so far — and then blocks forever, waiting for the parent to SIGKILL it. It
never finishes the run on its own.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.events import Event
from forklab.engine.recording import run_recorded
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.sqlite_store import SqliteStore


class FreezingStore(SqliteStore):
    """A SqliteStore that freezes the process right after the append holding the stop event."""

    def __init__(self, db: str, stop: str, marker: str) -> None:
        super().__init__(db)
        self.stop_type, self.stop_node, count = stop.split(":")
        self.stop_count, self.seen, self.marker = int(count), 0, marker
        self.appended: list[dict[str, object]] = []

    def append(self, run_id: str, events: Sequence[Event], *, expected_seq: int) -> None:
        super().append(run_id, events, expected_seq=expected_seq)
        self.appended.extend(e.to_wire() for e in events)
        self.seen += sum(e.type == self.stop_type and e.node == self.stop_node for e in events)
        if self.seen >= self.stop_count:
            partial = Path(self.marker + ".partial")
            partial.write_text(json.dumps(self.appended))
            os.replace(partial, self.marker)
            threading.Event().wait()  # frozen mid-run until the parent kills us


def main(db: str, run_id: str, scenario_name: str, stop: str, marker: str) -> None:
    scenario = SCENARIOS[scenario_name]
    env = Environment(clock=FixedClock(), ids=counter_ids())
    run_recorded(scenario.graph(), scenario.input, store=FreezingStore(db, stop, marker),
                 env=env, run_id=run_id)
    sys.exit(f"the run finished without reaching {stop!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
