"""Read-only share links (SPEC §4.5 Sharing): create, revoke, resolve.

A share link lets someone without an account read one run, fork point, diff or sweep at
``/s/<token>/``. Only project admins create and revoke them. A revoked or unknown token does
not exist (``not_found``), the same answer as for a run outside one's projects.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from forklab.runs import queries
from forklab.runs.access import User, account, require_role
from forklab.runs.errors import InvalidArgument, NotFound
from forklab.runs.models import Project, Role, Run, ShareLink
from forklab.runs.positions import parse_seq, seq_in

KINDS = tuple(ShareLink.TargetKind.values)


def _target_runs(kind: str, target: dict[str, Any], user: User) -> tuple[Project, dict[str, Any]]:
    """The project the target lives in and its normalized form; every run must be readable."""
    if kind in ("run", "point"):
        run = queries.get_run(str(target.get("run", "")), user=user)
        clean: dict[str, Any] = {"run": run.id}
        if kind == "point":  # a seq the run has: a link to no point would open broken
            clean["seq"] = seq_in(run, parse_seq(target.get("seq", ""), name="seq"), name="seq")
        return run.project, clean
    if kind == "diff":
        base = queries.get_run(str(target.get("base", "")), user=user)
        variant = queries.get_run(str(target.get("variant", "")), user=user)
        if base.project_id != variant.project_id:
            raise InvalidArgument("a diff share compares two runs of one project")
        return base.project, {"base": base.id, "variant": variant.id}
    if kind == "sweep":
        group = str(target.get("group", ""))
        first = queries.runs_for_user(user).filter(fork_group_id=group).first()
        if first is None:
            raise NotFound(f"no sweep {group!r}", fork_group_id=group)
        return first.project, {"group": group}
    raise InvalidArgument(f"unknown share kind {kind!r}; expected one of: {', '.join(KINDS)}",
                          field="kind")


def create_share(*, user: User, kind: str, target: dict[str, Any]) -> ShareLink:
    """A new read-only link to ``target`` (admins of the target's project only)."""
    project, clean = _target_runs(kind, target, user)
    require_role(user, project, Role.ADMIN, action="creating a share link")
    return ShareLink.objects.create(
        project=project, token=secrets.token_urlsafe(24), target_kind=kind, target=clean,
        created_by=account(user))


def revoke_share(*, user: User, token: str) -> ShareLink:
    """Revoke a link (idempotent); it resolves to nothing from now on."""
    link = ShareLink.objects.select_related("project").filter(token=token).first()
    if link is None or not queries.visible_projects(user).filter(pk=link.project_id).exists():
        raise NotFound("no such share link")
    require_role(user, link.project, Role.ADMIN, action="revoking a share link")
    if link.revoked_at is None:
        link.revoked_at = timezone.now()
        link.save(update_fields=["revoked_at"])
    return link


def resolve_share(token: str) -> ShareLink:
    """The active link for ``token``; unknown and revoked tokens are ``not_found``."""
    link = (ShareLink.objects.select_related("project")
            .filter(token=token, revoked_at__isnull=True).first())
    if link is None:
        raise NotFound("this share link does not exist or was revoked")
    return link


def shared_run(link: ShareLink, run_id: str) -> Run:
    """A run the link may show: one of its targets (or, for a sweep, one of its variants or
    their base), always inside the link's project."""
    run = Run.objects.select_related("project").filter(pk=run_id, project=link.project).first()
    if run is None or not _covers(link, run):
        raise NotFound(f"no run {run_id!r} behind this share link", run_id=run_id)
    return run


def shared_seq(link: ShareLink, run: Run) -> int:
    """The seq a point share opens at. One the run does not have (a link stored before
    seqs were checked, or damaged) is ``not_found``: the link is broken, not the reader's
    request, and no other link's point is guessed instead."""
    try:
        return seq_in(run, parse_seq(link.target.get("seq"), name="seq"), name="seq")
    except InvalidArgument as exc:
        raise NotFound(f"this share link points at no position in the run ({exc.message}); "
                       "ask whoever shared it for a new link", run_id=run.id) from None


def _covers(link: ShareLink, run: Run) -> bool:
    target = link.target
    if link.target_kind in ("run", "point"):
        return bool(run.id == target.get("run"))
    if link.target_kind == "diff":
        return run.id in (target.get("base"), target.get("variant"))
    group = target.get("group")
    return run.fork_group_id == group or Run.objects.filter(
        fork_group_id=group, parent_run_id=run.id, project=link.project).exists()


def shares_for(*, user: User, project: Project) -> QuerySet[ShareLink]:
    """A project's links, newest first (admins only)."""
    require_role(user, project, Role.ADMIN, action="managing share links")
    return ShareLink.objects.filter(project=project).order_by("-created_at")
