"""A code-first workflow (SPEC §7) in scale-out mode: a separate ``forklab worker`` process
records it and runs its fork's tail, its vendor calls reaching the loopback stub through
the client's own environment variables — runs like any other, on workers too."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from forklab.runs.forking import start_fork
from forklab.runs.models import Run
from forklab.runs.services import start_recording
from forklab.runs.specs import ForkSpec, RunSpec
from tests.scale.test_worker import WORKER_ID, finished, pytestmark, worker
from tests.vendor_stub import VendorStub
from tests.ws.conftest import World

__all__ = ["pytestmark", "worker"]

SUPPORT = "forklab.demo_agents.support:support"
TICKET = {"ticket": "Order A-1001 arrived damaged, please refund 39.98"}


@pytest.fixture
def vendor() -> Iterator[VendorStub]:
    with VendorStub() as stub:
        yield stub


@pytest.fixture
def worker_env(vendor: VendorStub) -> dict[str, str]:
    """The worker's clients reach the stub, as a team's would reach the vendor."""
    return {"OPENAI_BASE_URL": vendor.openai_base_url, "OPENAI_API_KEY": "sk-user",
            "OPENAI_MAX_RETRIES": "0"}


@sync_to_async
def recorded(world: World) -> dict[str, Any]:
    run = start_recording(user=world.member, spec=RunSpec(
        workflow=SUPPORT, project=world.project.slug, input=TICKET))
    return {**finished(run.id), "id": run.id}


@sync_to_async
def forked(world: World, base: str) -> dict[str, Any]:
    run = start_fork(user=world.member, spec=ForkSpec(
        base_run=base, policy={"memoize": True},
        changes=[{"kind": "tool_result", "call": "support/tool:lookup_order#1",
                  "result": {"found": False}}])).run
    return {**finished(run.id), "output": Run.objects.get(pk=run.id).memory["output"]}


async def test_the_worker_records_a_workflow_run_and_runs_its_forks_tail(
        world: World, vendor: VendorStub, worker: subprocess.Popen[bytes]) -> None:
    base = await recorded(world)
    assert (base["status"], base["task_status"]) == ("completed", "SUCCESSFUL"), base
    assert base["worker_ids"] == [WORKER_ID]
    assert len(vendor.bodies("openai")) == 2  # ask for the tools, then answer
    vendor.reset()
    fork = await forked(world, base["id"])
    assert (fork["status"], fork["task_status"]) == ("completed", "SUCCESSFUL"), fork
    assert "found" in fork["output"]
    assert len(vendor.requests) == 1  # only the call whose request the change altered
    assert worker.poll() is None, "the worker died"
