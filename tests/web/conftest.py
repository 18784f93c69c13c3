"""The dashboard tests' world: the demo project (the golden logs, ``install_golden_demo``;
``demo`` is its admin), a
member ``bob``, a viewer ``vera``, an outsider ``eve`` (admin of project ``other``, which has
a run of its own), a finished prompt fork of ``research-write``, an ``order-fulfilment`` fork
paused at its approval gate and a finished two-variant sweep.

Built once per module and committed (the forks run on the task thread pool, which opens its
own connections), flushed after the module; tests read it inside rolled-back transactions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from forklab.engine.fork.wire import AlignedStep, PathEntry
from forklab.runs import forking
from forklab.runs.models import Membership, Project, Role, Run
from forklab.runs.specs import ForkSpec, SweepSpec
from forklab.runs.task_backends import drain
from tests.golden_runs import install_golden_demo, load_golden_run
from tests.web.matrix import MatrixWorld, build_matrix

HTMX = {"HX-Request": "true"}


@dataclass
class World:
    demo: Project
    other: Project
    users: dict[str, Any]
    runs: dict[str, str]  # demo scenario -> run id
    other_run: str
    fork: str  # research-write, prompt of write changed, completed
    paused_fork: str  # order-fulfilment forked before approve, paused at the gate
    sweep: str  # fork group id of a finished research-write sweep

    def client(self, who: str | None) -> Client:
        client = Client()
        if who is not None:
            client.force_login(self.users[who])
        return client

    def run(self, run_id: str) -> Run:
        return Run.objects.get(pk=run_id)


def build_world() -> World:
    demo = install_golden_demo()
    users = {"demo": get_user_model().objects.get(username="demo")}
    other = Project.objects.create(slug="other", name="Other team")
    for name, project, role in (("bob", demo.project, Role.MEMBER),
                                ("vera", demo.project, Role.VIEWER), ("eve", other, Role.ADMIN)):
        users[name] = get_user_model().objects.create_user(name, password="pw")
        Membership.objects.create(user=users[name], project=project, role=role)
    other_run = load_golden_run(project=other, scenario="diamond", label="theirs")
    runs = {**demo.recorded, **demo.existing}
    admin = users["demo"]
    fork = forking.start_fork(user=admin, spec=ForkSpec(
        base_run=runs["research-write"], at={"before_node": "write"}, label="poem",
        changes=[{"kind": "prompt", "target": "write", "system_prompt": "Write a poem."}]))
    paused = forking.start_fork(user=admin, spec=ForkSpec(
        base_run=runs["order-fulfilment"], at={"before_node": "approve"}))
    group = forking.start_sweep(user=admin, spec=SweepSpec(
        base_run=runs["research-write"], at={"before_node": "write"}, variants={
            "terse": [{"kind": "prompt", "target": "write", "system_prompt": "Be terse."}],
            "warm": [{"kind": "temperature", "target": "write", "temperature": 1.2}]}))
    assert drain(timeout=60), "the world's forks did not finish"
    assert Run.objects.get(pk=fork.run.id).status == "completed"
    assert Run.objects.get(pk=paused.run.id).status == "paused"
    return World(demo=demo.project, other=other, users=users, runs=runs,
                 other_run=other_run.id, fork=fork.run.id, paused_fork=paused.run.id,
                 sweep=group)


@pytest.fixture(scope="module")
def world(django_db_setup: None, django_db_blocker: Any) -> Iterator[World]:
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)
        built = build_world()
    yield built
    with django_db_blocker.unblock():
        drain(timeout=30)
        call_command("flush", interactive=False, verbosity=0)


@pytest.fixture(scope="module")
def matrix(django_db_setup: None, django_db_blocker: Any) -> Iterator[MatrixWorld]:
    """Every run kind in every status and label combination (tests/web/matrix.py)."""
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)
        built = build_matrix()
    yield built
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)


def admin(matrix: MatrixWorld) -> Client:
    """A client logged in as the matrix world's admin."""
    client = Client()
    client.force_login(matrix.admin)
    return client


def page(response: Any) -> str:
    return response.content.decode()


def htmx(target: str) -> dict[str, str]:
    """Headers of an htmx request swapping into ``#target``."""
    return {**HTMX, "HX-Target": target}


def step(op: Literal["same", "changed", "inserted", "skipped"], node: str) -> AlignedStep:
    """An aligned diff step of ``node`` (first execution, iteration 1) on both sides."""
    entry = PathEntry(node=node, occurrence=1, iteration=1, status="completed")
    return AlignedStep(op=op, base=entry, variant=entry)
