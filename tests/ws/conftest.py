"""A small world for websocket tests: a project, its member, an outsider, a recorded base run.

The base run is ``review-loop`` (its golden log, ``tests/golden_runs.py``) under a graph with
simulated model latency, so a fork's tail takes long enough to be watched while it runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from forklab.engine.graph import parse_graph
from forklab.engine.scenarios import SCENARIOS
from forklab.runs.models import Membership, Project, Role, Run
from forklab.runs.task_backends import drain
from tests.golden_runs import load_golden_run

LATENCY_MS = 15


@dataclass
class World:
    project: Project
    member: Any
    outsider: Any
    token: str
    base: Run


def slow_review_loop() -> Any:
    wire = SCENARIOS["review-loop"].graph().to_wire()
    for agent in wire["agents"].values():
        agent["latency_ms"] = LATENCY_MS
    return parse_graph(wire)


@pytest.fixture(autouse=True)
def wakeups_only(settings: Any) -> None:
    """No safety polling: what arrives live must have come through a channel-layer wake-up."""
    settings.FORKLAB_STREAM_POLL_S = 3600


@pytest.fixture
def world(transactional_db: None) -> Iterator[World]:
    users = get_user_model().objects
    project = Project.objects.create(slug="streams", name="Streams")
    member = users.create_user("member")
    Membership.objects.create(user=member, project=project, role=Role.MEMBER)
    outsider = users.create_user("outsider")
    elsewhere = Project.objects.create(slug="elsewhere", name="Elsewhere")
    Membership.objects.create(user=outsider, project=elsewhere, role=Role.ADMIN)
    graph = slow_review_loop()
    base = load_golden_run(project=project, scenario="review-loop", graph=graph, user=member)
    yield World(project=project, member=member, outsider=outsider,
                token=Token.objects.create(user=member).key, base=base)
    assert drain(timeout=60), "background tasks still running after the test"
