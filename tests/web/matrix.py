"""The page matrix's world: real runs of one small graph (``matrix.yaml``) in every status, for
primary runs, forks and forks of forks, recorded into the test database by the engine itself.

Statuses a run reaches by finishing (completed, failed, blocked, paused — and cancelled,
which the cancel use case records on a paused run) are recorded for real. ``running`` is a
real prefix of a finished run's events appended through the store under a new id (a run the
process died in); ``queued`` is what the fork, sweep and recording use cases write before
their task runs (the task is simply not executed). A primary run cannot be ``blocked`` (only
a fork's side-effect guard blocks), so that one combination does not exist.

Every provenance label appears: ``live`` (the primary run and a fork's targeted node),
``changed`` (a node downstream of a change), ``reused`` (a write replayed from the recording),
``simulated`` (an approval answered by a change), ``blocked`` (the guard) and ``memo``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from django.contrib.auth import get_user_model

from forklab.engine.fork import fork
from forklab.engine.graph import GraphSpec, load_graph
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import run_recorded
from forklab.runs import forking, services, sharing, tasks
from forklab.runs.engine_env import build_environment
from forklab.runs.models import Membership, Project, Role, Run
from forklab.runs.specs import ForkSpec, RunSpec, SweepSpec
from forklab.runs.store import DjangoStore

GRAPH_FILE = Path(__file__).with_name("matrix.yaml")
STATUSES = ("queued", "running", "paused", "completed", "failed", "blocked", "cancelled")
KINDS = ("primary", "fork", "fork_of_fork")
LABELS = ("live", "reused", "simulated", "changed", "blocked", "memo")
INPUT = {"region": "us-east", "ticket": "restock widgets"}


@dataclass
class Case:
    kind: str
    status: str
    run: str
    compare_to: str  # the run its diff page compares it with
    shares: dict[str, str] = field(default_factory=dict)  # share kind -> token

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.status}"


@dataclass
class MatrixWorld:
    project: Project
    admin: Any
    cases: dict[str, Case]
    groups: dict[str, str]  # what the group holds -> fork group id
    memo_fork: str

    def case(self, kind: str, status: str) -> Case:
        return self.cases[f"{kind}-{status}"]


def approve(_question: dict[str, Any]) -> HumanAnswer:
    return HumanAnswer(decision="approved")


@contextmanager
def tasks_held() -> Iterator[None]:
    """Use cases enqueue their task on commit; here it is never executed (queued rows)."""
    with mock.patch.object(tasks, "enqueue_fork", return_value=None), mock.patch.object(tasks, "enqueue_sweep"), \
            mock.patch.object(tasks, "enqueue_recording"):
        yield


def running_copy(store: DjangoStore, run_id: str) -> str:
    """A new run holding ``run_id``'s events up to the first node start after its prefix:
    the log of a run whose process stopped inside that node."""
    events = store.read(run_id)
    begin = next(i for i, e in enumerate(events) if e.type == "run.forked") + 1 \
        if any(e.type == "run.forked" for e in events) else 0
    cut = next(i for i, e in enumerate(events) if i >= begin and e.type == "node.started")
    new_id = f"{run_id[:20]}-running"
    copied = [dataclasses.replace(e, run_id=new_id, **({"label": "running"} if
              e.type == "run.started" else {})) for e in events[:cut + 1]]
    store.append(new_id, copied, expected_seq=0)
    return new_id


def _fork(store: DjangoStore, base: str, group: str, **options: Any) -> str:
    options.setdefault("budget", {"max_live_calls": None, "max_cost_usd": None})
    return str(fork(base, store=store, env=build_environment(), fork_group_id=group,
                    **options).run_id)


def forks_of(store: DjangoStore, admin: Any, base: str, group: str) -> dict[str, str]:
    """One fork of ``base`` in each status (all but queued share the fork group)."""
    runs = {
        "completed": _fork(store, base, group, at="start", label="completed", change=[
            {"kind": "prompt", "target": "plan", "system_prompt": "Plan it in one line."},
            {"kind": "human_response", "decision": "approved"}]),
        "failed": _fork(store, base, group, at="start", label="failed",
                        change={"kind": "input_patch", "patch": {"region": "eu-west"}}),
        "blocked": _fork(store, base, group, at={"before_node": "notify"}, label="blocked",
                         policy={"side_effects": "block"}),
        "paused": _fork(store, base, group, at={"before_node": "approve"}, label="paused"),
    }
    cancelled = _fork(store, base, group, at={"before_node": "approve"}, label="cancelled")
    forking.cancel(user=admin, run_id=cancelled)
    runs["cancelled"] = cancelled
    runs["running"] = running_copy(store, runs["completed"])
    with tasks_held():
        runs["queued"] = forking.start_fork(user=admin, spec=ForkSpec(
            base_run=base, at={"before_node": "summary"}, label="queued")).run.id
    return runs


def primaries(store: DjangoStore, graph: GraphSpec, admin: Any) -> dict[str, str]:
    env = build_environment()
    runs = {
        "completed": run_recorded(graph, INPUT, store=store, env=env, hitl=approve,
                                  label="completed").run_id,
        "failed": run_recorded(graph, {**INPUT, "region": "eu-west"}, store=store, env=env,
                               label="failed").run_id,
        "paused": run_recorded(graph, INPUT, store=store, env=env, label="paused").run_id,
    }
    cancelled = run_recorded(graph, INPUT, store=store, env=env, label="cancelled").run_id
    forking.cancel(user=admin, run_id=cancelled)
    runs["cancelled"] = cancelled
    runs["running"] = running_copy(store, runs["completed"])
    with tasks_held():
        runs["queued"] = services.start_recording(user=admin, spec=RunSpec(
            graph=graph.id, input=INPUT, label="queued")).id
    return runs


def build_matrix() -> MatrixWorld:
    project = Project.objects.create(slug="matrix", name="Matrix")
    admin = get_user_model().objects.create_user("matrix-admin", password="pw")
    Membership.objects.create(user=admin, project=project, role=Role.ADMIN)
    graph = load_graph(GRAPH_FILE)
    store = DjangoStore(project, created_by=admin)
    store.save_graph(graph)
    prim = primaries(store, graph, admin)
    forks = forks_of(store, admin, prim["completed"], "matrix-forks")
    # The forks of forks descend from a fork whose gate a person answered: a fork's
    # human_response change stays active in its descendants' tails (SPEC §3.2, changes
    # combined), so below forks["completed"] no gate would ever pause.
    answered = _fork(store, prim["completed"], "matrix-fof-base", at="start", hitl=approve,
                     label="answered", change={"kind": "prompt", "target": "plan",
                                               "system_prompt": "Plan it in one line."})
    fofs = forks_of(store, admin, answered, "matrix-fofs")
    memo = _fork(store, prim["completed"], "matrix-forks", at="start", label="memo",
                 policy={"memoize": True}, change={"kind": "prompt", "target": "summary",
                                                   "system_prompt": "Say it in one word."})
    with tasks_held():
        queued_group = forking.start_sweep(user=admin, spec=SweepSpec(
            base_run=prim["completed"], at={"before_node": "summary"},
            variants={"a": [], "b": {"kind": "temperature", "target": "summary",
                                     "temperature": 1.0}}))
    cases: dict[str, Case] = {}
    for kind, runs, base in (("primary", prim, prim["completed"]),
                             ("fork", forks, prim["completed"]),
                             ("fork_of_fork", fofs, answered)):
        for status, run_id in runs.items():
            case = Case(kind=kind, status=status, run=run_id, compare_to=base)
            case.shares = _shares(admin, case)
            cases[case.key] = case
    return MatrixWorld(project=project, admin=admin, cases=cases, memo_fork=memo, groups={
        "fork": "matrix-forks", "fork_of_fork": "matrix-fofs", "queued": queued_group})


def _shares(admin: Any, case: Case) -> dict[str, str]:
    links = {
        "run": sharing.create_share(user=admin, kind="run", target={"run": case.run}),
        "point": sharing.create_share(user=admin, kind="point",
                                      target={"run": case.run, "seq": 1}),
        "diff": sharing.create_share(user=admin, kind="diff", target={
            "base": case.compare_to, "variant": case.run}),
    }
    return {kind: link.token for kind, link in links.items()}


def labels_recorded(run_ids: list[str]) -> set[str]:
    """Every provenance label the runs' timelines can show (calls, memo hits, guard stops)."""
    from forklab.runs.models import Event

    labels: set[str] = set()
    for type_, payload in Event.objects.filter(run_id__in=run_ids).values_list("type", "payload"):
        if payload.get("label") and type_ != "node.completed":
            labels.add(payload["label"])
        if type_ == "node.completed" and payload.get("memo"):
            labels.add("memo")
        if type_ == "node.reused":  # a served node: a memo hit whose calls are reused
            labels |= {"memo", *(a["label"] for a in payload["actions"] if a.get("label"))}
        if type_ == "effect.suppressed":
            labels.add("blocked")
    return labels


def statuses(world: MatrixWorld) -> dict[str, str]:
    return {key: Run.objects.get(pk=case.run).status for key, case in world.cases.items()}
