"""What both fault tests share: the slow chain graph, a recorded base, child-process
environments, and the checks every fault must pass afterwards.

The stated bound: a fork whose executor is SIGKILLed ends (``completed`` — resumed — or
``failed worker_lost``) within ``RECOVERY_BOUND_S`` of the kill: one lease TTL (2 s here)
for the dead owner's lease to expire, one sweep interval (0.5 s) for a survivor to notice,
and the rest of the tail (a few 1-second model calls). The deadline below is generous
because CI machines are slow and shared; it is a bound, not a timing measurement.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from forklab.engine.graph import loads_graph
from forklab.runs.models import Event, Membership, Project, Role, Run
from forklab.runs.services import install_graph, record_run

ROOT = Path(__file__).resolve().parents[2]
LEASE_TTL_S = 2.0
RECOVERY_BOUND_S = 120.0
LATENCY_S = 1.0
CHAIN = """
id: slow-chain
start: outline
agents:
  writer: {model: scripted-small, system_prompt: Write carefully., temperature: 0.3}
nodes:
  - {id: outline, kind: agent, agent: writer, reads: [topic], writes: [outline],
     prompt: "Outline: {topic}"}
  - {id: draft, kind: agent, agent: writer, reads: [outline], writes: [draft],
     prompt: "Draft from: {outline}"}
  - {id: polish, kind: agent, agent: writer, reads: [draft], writes: [final],
     prompt: "Polish: {draft}"}
  - {id: review, kind: agent, agent: writer, reads: [final], writes: [review],
     prompt: "Review: {final}"}
edges:
  - {from: outline, to: draft}
  - {from: draft, to: polish}
  - {from: polish, to: review}
"""
FORK = {"at": "start", "changes": [{"kind": "input_patch",
                                     "patch": {"topic": "forklab survives a crash"}}]}
OTHER = {"at": "start", "changes": [{"kind": "input_patch",
                                      "patch": {"topic": "forklab redoes lost work"}}]}


def seed() -> tuple[str, str]:
    """Project, member with a token, the chain graph and a completed base run: (token, base)."""
    project = Project.objects.create(slug="faults", name="Faults")
    member = get_user_model().objects.create_user("member")
    Membership.objects.create(user=member, project=project, role=Role.MEMBER)
    graph = loads_graph(CHAIN)
    install_graph(project=project, graph=graph)
    base = record_run(project=project, graph=graph, input={"topic": "forklab 1.0"}, user=member)
    assert base.status == "completed"
    return Token.objects.create(user=member).key, base.id


def child_env(count_file: Path, **extra: str) -> dict[str, str]:
    """A web process's or worker's environment: short leases, fast sweeps, the counting
    provider."""
    return {**os.environ, "FORKLAB_LEASE_TTL_S": str(LEASE_TTL_S),
            "FORKLAB_HEARTBEAT_S": "0.4", "FORKLAB_RECOVERY_SWEEP_S": "0.5",
            "FORKLAB_PROVIDERS": "tests.faults.counting.CountingProvider",
            "FORKLAB_FAULT_COUNT": str(count_file), "FORKLAB_FAULT_LATENCY_S": str(LATENCY_S),
            "FORKLAB_SECRET_KEY": "fault-tests", "FORKLAB_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT), **extra}


def wait_for(what: str, check: Callable[[], Any], *, deadline_s: float,
             alive: Callable[[], bool] = lambda: True) -> Any:
    """Poll ``check`` until it returns something truthy; fail at the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = check()
        if value:
            return value
        assert alive(), f"a process died while waiting for {what}"
        assert time.monotonic() < deadline, f"{what}: not within {deadline_s} s"
        time.sleep(0.05)


def started(run_id: str, node: str) -> bool:
    """The run's log shows ``node`` started (its model call is now in flight)."""
    return Event.objects.filter(run_id=run_id, type="node.started", node=node).exists()


def finished(run_id: str) -> str | None:
    """The run's final status once it is finished *and* its executor has let go of it.

    The append of the final event frees the lease in the same transaction
    (``RunRowProjection``), so both change together; the lease is still checked so a fault
    test fails if that ever stops being true.
    """
    row = Run.objects.filter(pk=run_id).values_list("status", "lease_owner").first()
    if row is None or row[1] != "":
        return None
    return row[0] if row[0] in ("completed", "failed", "blocked", "cancelled") else None


def assert_recovered_intact(run_id: str, count_file: Path) -> list[str]:
    """The checks every fault must pass: the log is contiguous, the fork finished, and each
    model call the log says was paid was paid exactly once (the count file agrees)."""
    rows = list(Event.objects.filter(run_id=run_id).order_by("seq")
                .values_list("seq", "type", "payload"))
    assert [seq for seq, _, _ in rows] == list(range(1, len(rows) + 1))
    run = Run.objects.get(pk=run_id)
    assert run.last_seq == len(rows) and run.lease_owner == ""
    assert run.status == "completed" or (run.status == "failed"
                                         and run.error["code"] == "worker_lost"), run.error
    paid_in_log = [p for _, t, p in rows if t == "agent.responded"
                   and p.get("label") in ("live", "changed")]
    paid = Counter(p["request_hash"] for p in paid_in_log)
    counted = Counter(line.split()[0] for line in count_file.read_text().splitlines())
    assert all(n == 1 for n in paid.values()), f"the log records a call paid twice: {paid}"
    assert {h: counted[h] for h in paid} == paid, "the provider was paid for a call twice"
    return [t for _, t, _ in rows]


def paid_calls(count_file: Path) -> int:
    """How many model calls the counting provider completed, in every process."""
    return len(count_file.read_text().splitlines())


def paid_in_logs(*run_ids: str) -> int:
    return sum(1 for p in Event.objects.filter(run_id__in=run_ids, type="agent.responded")
               .values_list("payload", flat=True) if p.get("label") in ("live", "changed"))
