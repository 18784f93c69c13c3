"""Use cases: the only code that changes forklab's data (views, API and commands call these).

Keyword-only and typed. Recording a run is deliberately *not* one transaction: every event is
its own atomic append (see ``forklab.runs.store``), so a crash loses nothing already recorded
and readers see the run progress.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User as Account
from django.db import transaction

from forklab.engine import inputs
from forklab.engine.graph import GraphSpec, ToolNode, load_graph, parse_graph
from forklab.engine.inputs import check_graph_document, check_json_value
from forklab.engine.oracle import HumanAnswer
from forklab.engine.recording import run_recorded
from forklab.engine.scenarios import SCENARIOS, Scenario
from forklab.runs import leases, queries, tasks
from forklab.runs.access import RANK, User, account, require_role, role_in
from forklab.runs.demo_login import DEMO_PASSWORD, DEMO_USERNAME
from forklab.runs.engine_env import build_environment
from forklab.runs.errors import InvalidArgument, NotFound
from forklab.runs.models import GraphVersion, Membership, Project, Role, Run, RunKind, RunStatus
from forklab.runs.specs import InvalidRequest, RunSpec
from forklab.runs.store import DEFAULT_PROJECT_SLUG, DjangoStore

DEMO_PROJECT = "demo"
HUMAN_DECISIONS = ("approved", "rejected", "edited")


@dataclass(frozen=True)
class GraphSource:
    """A graph to record: a named demo scenario (with its default input) or a file."""

    graph: GraphSpec
    scenario: Scenario | None = None

    @property
    def default_input(self) -> dict[str, Any]:
        return dict(self.scenario.input) if self.scenario else {}


def resolve_graph(source: str) -> GraphSource:
    """A scenario name, or a path to a ``.json``/``.yaml``/``.yml`` graph file (validated)."""
    if source in SCENARIOS:
        scenario = SCENARIOS[source]
        return GraphSource(graph=scenario.graph(), scenario=scenario)
    path = Path(source)
    if path.suffix in (".json", ".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise NotFound(f"graph file {source!r} does not exist", path=source)
        inputs.check_json_text(path.read_bytes(), where=f"graph file {source}",
                               max_bytes=inputs.MAX_GRAPH_BYTES)
        graph = load_graph(path)
        inputs.check_graph_document(graph.to_wire(), where=f"graph file {source}")
        return GraphSource(graph=graph)
    raise NotFound(
        f"{source!r} is neither a scenario nor a graph file; scenarios: {', '.join(SCENARIOS)}",
        source=source,
    )


def parse_input(text: str | None) -> dict[str, Any] | None:
    """``--input`` JSON: an object, or None when not given."""
    if text is None:
        return None
    try:
        value = inputs.loads(text, where="--input")
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"--input is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"--input must be a JSON object, got {inputs.json_kind(value)}")
    return value


def ensure_project(*, slug: str, name: str | None = None) -> Project:
    project, _ = Project.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return project


def project_for_recording(slug: str) -> Project:
    """The project to record into: ``default`` is created on demand, others must exist."""
    if slug == DEFAULT_PROJECT_SLUG:
        return ensure_project(slug=slug, name="Default")
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        known = ", ".join(Project.objects.values_list("slug", flat=True)) or "none"
        raise NotFound(f"no project {slug!r}; projects: {known}", project=slug)
    return project


def install_graph(*, project: Project, graph: GraphSpec) -> GraphVersion:
    """Store ``graph`` in ``project``: the existing version if unchanged, else a new one."""
    version = DjangoStore(project).save_graph(graph)
    return GraphVersion.objects.select_related("graph").get(
        graph__project=project, graph__graph_id=graph.id, version=version
    )


def record_run(
    *,
    project: Project,
    graph: GraphSpec,
    input: dict[str, Any],
    label: str = "",
    user: Account | None = None,
    human_decision: str | None = None,
) -> Run:
    """Execute ``graph`` on ``input`` recording every event into the database.

    ``human_decision`` answers approval gates as they arise; without it the run pauses at
    the first gate (status ``paused``). Returns the run row (its projection is current).
    """
    if human_decision is not None and human_decision not in HUMAN_DECISIONS:
        raise InvalidArgument(
            f"unknown decision {human_decision!r}; expected one of {', '.join(HUMAN_DECISIONS)}"
        )
    hitl = None
    if human_decision is not None:
        decision = human_decision
        hitl = lambda _question: HumanAnswer(decision=decision)  # noqa: E731
    with leases.held(leases.new_owner("record")) as owner:  # a killed recorder is recovered
        store = DjangoStore(project, created_by=user, lease=owner)
        recorded = run_recorded(graph, input, store=store, env=build_environment(), label=label,
                                hitl=hitl)
    return Run.objects.select_related("project").get(pk=recorded.run_id)


@dataclass
class DemoResult:
    project: Project
    recorded: dict[str, str] = field(default_factory=dict)  # scenario -> new run id
    existing: dict[str, str] = field(default_factory=dict)  # scenario -> run id kept


def ensure_demo_user(*, project: Project, username: str = DEMO_USERNAME,
                     password: str = DEMO_PASSWORD) -> Account:
    """A non-superuser demo login, admin of ``project``; an existing password is kept."""
    user_model = get_user_model()
    with transaction.atomic():
        user, created = user_model.objects.get_or_create(username=username)
        if created:
            user.set_password(password)
            user.save(update_fields=["password"])
        for member_of in (project, ensure_project(slug=DEFAULT_PROJECT_SLUG, name="Default")):
            Membership.objects.update_or_create(
                user=user, project=member_of, defaults={"role": Role.ADMIN})
    return user


def install_demo() -> DemoResult:
    """Project ``demo``, user ``demo``/``demo``, the scenario graphs and one run of each.

    Idempotent: a scenario that already has a primary run in the project is not recorded
    again (so a second call records nothing).
    """
    project = ensure_project(slug=DEMO_PROJECT, name="Demo")
    user = ensure_demo_user(project=project)
    result = DemoResult(project=project)
    for name, scenario in SCENARIOS.items():
        graph = scenario.graph()
        install_graph(project=project, graph=graph)
        existing = (Run.objects.filter(project=project, graph_slug=graph.id,
                                       run_kind=RunKind.PRIMARY)
                    .order_by("created_at").values_list("id", flat=True).first())
        if existing is not None:
            result.existing[name] = existing
            continue
        run = record_run(project=project, graph=graph, input=dict(scenario.input),
                         label="demo", user=user, human_decision=scenario.hitl_decision)
        result.recorded[name] = run.id
    return result


# -- the API's use cases: registering graphs, recording runs in the background ---------------


def writable_project(user: User, slug: str | None, *, minimum: str,
                     action: str) -> Project:
    """The project ``user`` acts in: ``slug`` (must be readable, else not_found), or — when
    omitted — the one project where the user has at least ``minimum`` (else invalid_request)."""
    if slug is not None:
        project = queries.visible_projects(user).filter(slug=slug).first()
        if project is None:
            raise NotFound(f"no project {slug!r} among yours", project=slug)
        require_role(user, project, minimum, action=action)
        return project
    able = [p for p in queries.visible_projects(user)
            if RANK[Role(role_in(user, p) or Role.VIEWER)] >= RANK[Role(minimum)]]
    if len(able) != 1:
        names = ", ".join(p.slug for p in able) or "none"
        raise InvalidRequest(f"field 'project': name the project ({action} needs the {minimum} "
                             f"role; yours: {names})", field="project")
    return able[0]


@dataclass(frozen=True)
class RegisteredGraph:
    version: GraphVersion
    created: bool


def register_graph(*, user: User, project: str | None,
                   spec: dict[str, Any]) -> RegisteredGraph:
    """Validate ``spec`` with the engine and store it: a new version unless it equals the
    latest. Needs the admin role (a graph version changes what later runs execute)."""
    target = writable_project(user, project, minimum=Role.ADMIN, action="registering a graph")
    check_graph_document(spec, where="spec")  # size limits, storable strings and numbers
    graph = parse_graph(spec)  # invalid_graph naming the node and field
    # a tool this deployment cannot run (outside FORKLAB_TOOL_MODULES, or not importable) is
    # unknown_tool now, as a fork's config change naming it is, not when a run reaches it
    tools = build_environment().tools
    for node in graph.nodes:
        if isinstance(node, ToolNode):
            tools.resolve(node.tool)
    latest = (GraphVersion.objects.filter(graph__project=target, graph__graph_id=graph.id)
              .order_by("-version").values_list("version", flat=True).first())
    version = install_graph(project=target, graph=graph)
    return RegisteredGraph(version=version, created=version.version != latest)


def start_recording(*, user: User, spec: RunSpec) -> Run:
    """Queue a primary run of a registered graph (``specs.RunSpec``); it is recorded in the
    background. Needs the member role in the graph's project."""
    version = _graph_version_for(user, spec)
    project = version.graph.project
    writes = live_writes(parse_graph(version.spec))
    if writes:
        require_role(user, project, Role.ADMIN,
                     action=f"recording a run whose graph has live write tools ({writes})")
    check_json_value(spec.input, where="input")
    run_id = uuid.uuid4().hex
    work = {"task": "record", "graph_id": version.graph.graph_id, "version": version.version,
            "input": spec.input, "label": spec.label}
    with transaction.atomic():
        run = Run.objects.create(
            id=run_id, project=project, graph_version=version, graph_slug=version.graph.graph_id,
            graph_version_number=version.version, run_kind=RunKind.PRIMARY, label=spec.label,
            created_by=account(user), input=spec.input, work=work)
        transaction.on_commit(lambda: tasks.enqueue_recording(run_id))
    return Run.objects.select_related("project").get(pk=run.pk)


def live_writes(graph: GraphSpec) -> str:
    """The write tools a recording of ``graph`` would execute for real (comma-separated; empty
    when none): recording them needs the same role as a fork that allows writes (admin)."""
    return ", ".join(node.id for node in graph.nodes
                     if getattr(node, "kind", "") == "tool" and getattr(node, "effect", "") == "write")


def _graph_version_for(user: User, spec: RunSpec) -> GraphVersion:
    if spec.project is not None:
        project = writable_project(user, spec.project, minimum=Role.MEMBER,
                                   action="recording a run")
        projects = [project]
    else:
        projects = list(queries.visible_projects(user).filter(graphs__graph_id=spec.graph))
    if not projects:
        raise NotFound(f"no graph {spec.graph!r} in your projects", graph=spec.graph)
    if len(projects) > 1:
        raise InvalidRequest(
            f"field 'project': graph {spec.graph!r} exists in several of your projects "
            f"({', '.join(p.slug for p in projects)}); name one", field="project")
    require_role(user, projects[0], Role.MEMBER, action="recording a run")
    versions = GraphVersion.objects.select_related("graph__project").filter(
        graph__project=projects[0], graph__graph_id=spec.graph)
    version = (versions.filter(version=spec.graph_version).first() if spec.graph_version
               else versions.order_by("-version").first())
    if version is None:
        known = list(versions.order_by("version").values_list("version", flat=True))
        raise NotFound(f"no graph {spec.graph!r} version {spec.graph_version or 'latest'} in "
                       f"project {projects[0].slug!r}; versions: {known or 'none'}",
                       graph=spec.graph, version=spec.graph_version)
    return version


def delete_run(*, user: User, run_id: str) -> None:
    """Delete a run that is not executing, with its events (admin role). Its forks keep
    their own logs; a fork of it can no longer be rebuilt against it."""
    from forklab.engine.errors import RunInProgress

    run = queries.get_run(run_id, user=user)
    require_role(user, run.project, Role.ADMIN, action="deleting a run")
    if run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
        raise RunInProgress(f"run {run_id!r} is {run.status}; cancel it first, then delete it",
                            run_id=run_id, status=run.status)
    run.delete()
