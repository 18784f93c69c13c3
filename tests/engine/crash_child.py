"""A child process that records a scenario into a SQLite file and freezes at a chosen event.

Run as ``python -m tests.engine.crash_child DB RUN_ID SCENARIO STOP MARKER`` from the repo
root. ``STOP`` is ``TYPE:NODE:N`` — the Nth event of type ``TYPE`` inside node ``NODE``
(e.g. ``node.completed:review:1``, ``agent.responded:vote:2``). When that event has been
appended (so it is committed to the file), the child writes ``MARKER`` atomically — a JSON
list of the wire form of every event it appended so far — and then blocks forever, waiting
for the parent to SIGKILL it. It never finishes the run on its own.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.events import Event
from forklab.engine.recording import run_recorded
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.sqlite_store import SqliteStore


def main(db: str, run_id: str, scenario_name: str, stop: str, marker: str) -> None:
    stop_type, stop_node, stop_count = stop.split(":")
    appended: list[dict[str, object]] = []
    seen = 0

    def on_event(event: Event) -> None:
        nonlocal seen
        appended.append(event.to_wire())
        if event.type == stop_type and event.node == stop_node:
            seen += 1
            if seen == int(stop_count):
                partial = Path(marker + ".partial")
                partial.write_text(json.dumps(appended))
                os.replace(partial, marker)
                threading.Event().wait()  # frozen mid-run until the parent kills us

    scenario = SCENARIOS[scenario_name]
    env = Environment(clock=FixedClock(), ids=counter_ids())
    run_recorded(scenario.graph(), scenario.input, store=SqliteStore(db), env=env,
                 run_id=run_id, on_event=on_event)
    sys.exit(f"the run finished without reaching {stop!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
