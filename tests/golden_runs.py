"""The Django tests' cheap world: runs loaded from the checked-in golden logs.

Recording a scenario through ``record_run`` executes every node and commits every event in
its own transaction (that is what recording must do, and ``tests/runs`` tests it). A test
that only needs *a recorded run* to read, fork or page through does not need to pay for
that again in every module: ``load_golden_run`` stores a scenario's golden log
(``tests/engine/golden/<scenario>.json``) under a fresh run id in **one** append, through
the same ``DjangoStore.append`` (gap check, fold, run-row projection, usage records, final
state) as a live recording. ``tests/engine/test_golden_logs.py`` proves the golden logs are
what recording each scenario produces today, so a loaded run is indistinguishable from a
recorded one except for its ids and its (fixed-clock) timestamps.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from forklab.engine.events import AnyEvent, from_wire
from forklab.engine.graph import GraphSpec
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.store import graph_hash
from forklab.runs.models import Project, Run
from forklab.runs.services import (
    DEMO_PROJECT,
    DemoResult,
    ensure_demo_user,
    ensure_project,
    install_graph,
)
from forklab.runs.store import DjangoStore
from tests.engine.golden_tool import load_golden


def golden_events(scenario: str, *, run_id: str, label: str = "",
                  upto_type: str | None = None, graph: GraphSpec | None = None
                  ) -> list[AnyEvent]:
    """The golden log of ``scenario`` as events of run ``run_id`` (labelled ``label``).

    ``upto_type`` cuts the log after the first event of that type: ``human.requested``
    gives the run as it stands paused at its first approval gate (what recording without
    an answer leaves behind). ``graph``: the run was recorded under this variant of the
    scenario's graph (one that records the same log, e.g. with simulated model latency).
    """
    events: list[AnyEvent] = []
    for wire in load_golden(scenario)["events"]:
        data: dict[str, Any] = dict(wire)
        if data["type"] == "run.started":
            data["payload"] = {**data["payload"], "label": label}
            if graph is not None:
                data["payload"]["graph_hash"] = graph_hash(graph)
        events.append(from_wire(data, run_id=run_id))
        if upto_type is not None and data["type"] == upto_type:
            break
    else:
        if upto_type is not None:
            raise ValueError(f"golden log {scenario!r} has no {upto_type!r} event")
    return events


def load_golden_run(*, project: Project, scenario: str, label: str = "",
                    user: AbstractBaseUser | None = None, paused: bool = False,
                    graph: GraphSpec | None = None) -> Run:
    """Store ``scenario``'s golden run in ``project`` in one append; return its row.

    The graph (``graph``, else the scenario's) is installed first: the run row points at
    that version, as a recording's would. ``paused``: only the log up to the first approval
    gate.
    """
    install_graph(project=project, graph=graph or SCENARIOS[scenario].graph())
    run_id = uuid.uuid4().hex
    events = golden_events(scenario, run_id=run_id, label=label, graph=graph,
                           upto_type="human.requested" if paused else None)
    DjangoStore(project, created_by=user).append(run_id, events, expected_seq=0)
    return Run.objects.select_related("project").get(pk=run_id)


def install_golden_demo() -> DemoResult:
    """What ``services.install_demo`` builds (project ``demo``, user ``demo``/``demo``
    admin of it, every scenario's graph and one ``demo``-labelled run of each), loaded from
    the golden logs instead of recorded."""
    project = ensure_project(slug=DEMO_PROJECT, name="Demo")
    user = ensure_demo_user(project=project)
    result = DemoResult(project=project)
    for name in SCENARIOS:
        run = load_golden_run(project=project, scenario=name, label="demo", user=user)
        result.recorded[name] = run.id
    return result
