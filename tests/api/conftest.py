"""The API tests' world: the demo project (loaded from the golden logs,
``install_golden_demo``) plus a second project ``lab`` with a user of each role, a completed
``diamond`` run and an ``order-fulfilment`` run paused at its approval gate.

Building the world takes a fraction of a second, so tests that run inside a rolled-back
transaction share one copy per module (``world``: committed once, flushed after the module).
Tests whose background tasks open their own connections need committed data: they are
marked ``django_db(transaction=True)`` and build their own copy (``fresh_world``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.management import call_command
from django.test import Client
from rest_framework.authtoken.models import Token

from forklab.runs.models import Membership, Project, Role, Run
from forklab.runs.task_backends import drain
from tests.golden_runs import install_golden_demo, load_golden_run

API = "/api/v1"


@dataclass
class World:
    demo: Project
    lab: Project
    users: dict[str, AbstractBaseUser]  # viewer, member, admin (of lab), demo (admin of demo)
    tokens: dict[str, str]
    demo_runs: dict[str, str]  # scenario -> run id in project demo
    lab_diamond: str  # a completed diamond run in lab
    lab_paused: str  # an order-fulfilment run paused at its approval gate
    extra: dict[str, Any] = field(default_factory=dict)

    def client(self, who: str | None) -> Client:
        """A client authenticated with ``who``'s token (anonymous when None)."""
        if who is None:
            return Client()
        return Client(headers={"Authorization": f"Token {self.tokens[who]}"})


def build_world() -> World:
    demo = install_golden_demo()
    lab = Project.objects.create(slug="lab", name="Lab")
    user_model = get_user_model()
    users: dict[str, AbstractBaseUser] = {"demo": user_model.objects.get(username="demo")}
    for role in (Role.VIEWER, Role.MEMBER, Role.ADMIN):
        user = user_model.objects.create_user(str(role), password="pw")
        Membership.objects.create(user=user, project=lab, role=role)
        users[str(role)] = user
    tokens = {name: Token.objects.create(user=user).key for name, user in users.items()}
    diamond = load_golden_run(project=lab, scenario="diamond", label="lab",
                              user=users["admin"])
    paused = load_golden_run(project=lab, scenario="order-fulfilment", label="lab paused",
                             paused=True)
    assert paused.status == "paused"
    runs = {**demo.recorded, **demo.existing}
    return World(demo=demo.project, lab=lab, users=users, tokens=tokens, demo_runs=runs,
                 lab_diamond=diamond.id, lab_paused=paused.id)


@pytest.fixture(scope="module")
def world(django_db_setup: None, django_db_blocker: Any) -> Iterator[World]:
    with django_db_blocker.unblock():
        built = build_world()
    yield built
    with django_db_blocker.unblock():
        drain(timeout=30)
        call_command("flush", interactive=False, verbosity=0)


@pytest.fixture
def fresh_world(transactional_db: None) -> Iterator[World]:
    # The module's shared world may still be committed (transactional tests run last, maybe
    # right after the module's other tests): start from an empty database.
    call_command("flush", interactive=False, verbosity=0)
    built = build_world()
    yield built
    assert drain(timeout=60), "background tasks still running at the end of the test"


def run_status(run_id: str) -> str:
    return str(Run.objects.get(pk=run_id).status)

