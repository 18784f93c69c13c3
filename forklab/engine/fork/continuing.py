"""Continuing a run that stopped: answering the gate it paused at, resuming it after a crash.

Here, not in :mod:`forklab.engine.recording`, because a fork continues under its fork
oracle: its runner is rebuilt from its ``run.forked`` (effective graph, changes, policy,
budget, memo: :func:`~forklab.engine.fork.variant.fork_runner`). Under the stored graph
alone, the rest of its tail would drop its changes — a fork changing a node after a gate,
answered at the gate, ran that node as the base had. Any other run continues live.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from forklab.engine.environment import Environment
from forklab.engine.events import Event
from forklab.engine.fork.variant import fork_runner
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import RecordedRun, load_run
from forklab.engine.runner import Runner
from forklab.engine.store import Store

Hitl = Callable[[dict[str, Any]], HumanAnswer | None]


def resume_run(run_id: str, *, store: Store, env: Environment | None = None,
               hitl: Hitl | None = None,
               on_event: Callable[[Event], None] | None = None) -> RecordedRun:
    """Continue a run that stopped (crash, kill) from its last node boundary."""
    handle = load_run(run_id, store=store, env=env)
    handle.state = continuing(handle, hitl=hitl, on_event=on_event).resume()
    return handle


def answer_run(run_id: str, answer: HumanAnswer, *, store: Store,
               env: Environment | None = None,
               on_event: Callable[[Event], None] | None = None) -> RecordedRun:
    """Answer the approval gate a paused run waits at and run it on."""
    handle = load_run(run_id, store=store, env=env)
    handle.state = continuing(handle, on_event=on_event).answer(answer)
    return handle


def continuing(handle: RecordedRun, *, hitl: Hitl | None = None,
               on_event: Callable[[Event], None] | None = None) -> Runner:
    """The runner that continues ``handle``'s run (see the module docstring)."""
    if handle.state.fork is not None:
        return fork_runner(handle.run_id, store=handle.store, env=handle.env, hitl=hitl,
                           on_event=on_event)
    runner = Runner(handle.graph, store=handle.store, run_id=handle.run_id, env=handle.env,
                    hitl=hitl, on_event=on_event, graph_version=handle.state.graph_version)
    runner.state = handle.state
    return runner


__all__ = ["answer_run", "continuing", "resume_run"]
