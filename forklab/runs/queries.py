"""Read-only queries. Views, the API and commands read through these, never write."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet

from forklab.runs.errors import InvalidArgument, NotFound
from forklab.runs.models import Project, Run, RunKind, RunStatus


def _check_choice(name: str, value: str | None, choices: list[str]) -> None:
    if value is not None and value not in choices:
        raise InvalidArgument(
            f"unknown {name} {value!r}; expected one of: {', '.join(choices)}",
            **{name: value},
        )


def visible_projects(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Project]:
    """Projects ``user`` can read: all for superusers, their memberships otherwise."""
    if not user.is_authenticated:
        return Project.objects.none()
    if getattr(user, "is_superuser", False):
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user)


def list_runs(
    *,
    projects: QuerySet[Project] | None = None,
    project: str | None = None,
    kind: str | None = None,
    status: str | None = None,
    graph: str | None = None,
    parent: str | None = None,
) -> QuerySet[Run]:
    """Runs newest first, filtered; ``projects`` limits to readable projects (None: all)."""
    _check_choice("kind", kind, list(RunKind.values))
    _check_choice("status", status, list(RunStatus.values))
    runs = Run.objects.select_related("project")
    filters: dict[str, Any] = {
        "project__slug": project, "run_kind": kind, "status": status,
        "graph_slug": graph, "parent_run_id": parent,
    }
    runs = runs.filter(**{k: v for k, v in filters.items() if v is not None})
    if projects is not None:
        runs = runs.filter(project__in=projects)
    return runs.order_by("-created_at", "id")


def runs_for_user(user: AbstractBaseUser | AnonymousUser, **filters: Any) -> QuerySet[Run]:
    return list_runs(projects=visible_projects(user), **filters)


def get_run(run_id: str, *, user: AbstractBaseUser | AnonymousUser | None = None) -> Run:
    """One run; outside the user's projects it does not exist (not_found, never forbidden)."""
    runs = Run.objects.select_related("project")
    if user is not None:
        runs = runs.filter(project__in=visible_projects(user))
    run = runs.filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"no run {run_id!r}", run_id=run_id)
    return run


def get_project(slug: str) -> Project:
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        known = ", ".join(Project.objects.values_list("slug", flat=True)) or "none"
        raise NotFound(f"no project {slug!r}; projects: {known}", project=slug)
    return project
