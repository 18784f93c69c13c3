"""A small world for lease and recovery tests: a project, a member, a panel graph and a
recorded base run; a provider that counts what it is paid for; and a stand-in for SIGKILL.

``Killed`` is raised from the event hook right after the chosen event is committed, and is
a ``BaseException``, so nothing of the executor runs afterwards: no outcome is recorded, no
lease released (the heartbeat is dropped by the test, as a dead process's would stop). The
real thing — processes killed with SIGKILL — is in ``tests/faults/``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from forklab.engine.environment import Environment
from forklab.engine.events import Event
from forklab.engine.graph import loads_graph
from forklab.engine.providers import ChatRequest, ChatResponse, ProviderRegistry
from forklab.engine.providers.scripted import ScriptedProvider
from forklab.runs import execution, forking, leases, planning
from forklab.runs.models import Membership, Project, Role, Run
from forklab.runs.services import install_graph, record_run

PANEL = """
id: panel
start: vote
agents:
  voter: {model: scripted-mini, system_prompt: Vote yes or no., temperature: 0.9}
  judge: {model: scripted-large, system_prompt: Weigh the votes and decide.}
nodes:
  - id: vote
    kind: agent
    reads: [proposal]
    writes: [votes, decision]
    prompt: "Proposal: {proposal}"
    roles:
      voters: {agent: voter, count: 3, choices: ["yes", "no"], writes: votes}
      judge: {agent: judge, choices: [ship, hold], writes: decision}
  - {id: announce, kind: agent, agent: judge, reads: [proposal, decision],
     writes: [announcement], prompt: "Announce {decision} on {proposal}"}
  - {id: summary, kind: agent, agent: judge, reads: [announcement], writes: [summary],
     prompt: "Summarize {announcement}"}
edges:
  - {from: vote, to: announce}
  - {from: announce, to: summary}
"""
INPUT = {"proposal": "Ship the new dashboard"}
CHANGE = [{"kind": "input_patch", "patch": {"proposal": "Ship it next week"}}]


class Killed(BaseException):
    """Stands for SIGKILL: raised past every ``except Exception`` of the executor."""


class CountingProvider:
    """The scripted provider, counting each completed (= paid) request by its hash."""

    name = "scripted"

    def __init__(self) -> None:
        self.inner = ScriptedProvider()
        self.paid: Counter[str] = Counter()

    def complete(self, request: ChatRequest) -> ChatResponse:
        response = self.inner.complete(request)
        self.paid[request.request_hash] += 1
        return response


@dataclass
class World:
    project: Project
    member: Any
    base: Run
    provider: CountingProvider


@pytest.fixture
def world(transactional_db: None, monkeypatch: pytest.MonkeyPatch) -> World:
    provider = CountingProvider()

    def environment() -> Environment:
        return Environment(providers=ProviderRegistry({"scripted": provider}))

    monkeypatch.setattr(execution, "build_environment", environment)
    monkeypatch.setattr(forking, "build_environment", environment)
    monkeypatch.setattr(planning, "build_environment", environment)  # plans carry the env
    project = Project.objects.create(slug="crashes", name="Crashes")
    member = get_user_model().objects.create_user("member")
    Membership.objects.create(user=member, project=project, role=Role.MEMBER)
    graph = loads_graph(PANEL)
    install_graph(project=project, graph=graph)
    base = record_run(project=project, graph=graph, input=INPUT, user=member)
    assert base.status == "completed"
    provider.paid.clear()
    return World(project=project, member=member, base=base, provider=provider)


def die_at(monkeypatch: pytest.MonkeyPatch, event_type: str, nth: int = 1) -> None:
    """The executor "dies" right after the ``nth`` event of ``event_type`` is committed
    (once: a later executor of the run is not killed again)."""
    seen = 0
    real = execution.on_event

    def hook(event: Event) -> None:
        nonlocal seen
        real(event)
        if event.type == event_type:
            seen += 1
            if seen == nth:
                raise Killed()

    monkeypatch.setattr(execution, "on_event", hook)


def execute_and_die(run_id: str) -> str:
    """Claim the run and execute it until ``Killed``; the dead owner's heartbeat stops."""
    owner = leases.new_owner("doomed")
    assert leases.claim(run_id, owner=owner)
    with pytest.raises(Killed):
        execution.drive(run_id, owner=owner)
    leases.keeper.drop(owner)
    return owner


def expire(run_id: str) -> None:
    """One lease TTL passed since the dead owner's last heartbeat."""
    Run.objects.filter(pk=run_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1))


def age(run_id: str) -> None:
    """The run was created more than one lease TTL ago."""
    Run.objects.filter(pk=run_id).update(
        created_at=timezone.now() - leases.ttl() - timedelta(seconds=1))
