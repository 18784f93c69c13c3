"""Share links: admins create and revoke them; anyone with the token reads the shared run,
point, diff or sweep at ``/s/<token>/`` — read-only, with no fork controls."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from forklab.runs import forking, queries, sharing
from forklab.runs.access import role_in
from forklab.runs.errors import NotFound
from forklab.runs.models import Role, Run, ShareLink
from forklab.web.views.common import HtmxHttpRequest, htmx_target, page_errors, page_or_partial
from forklab.web.views.compare import compare_context
from forklab.web.views.errors import error_page
from forklab.web.views.runs import run_context
from forklab.web.views.sweeps import sweep_context

TARGET_FIELDS = ("run", "seq", "base", "variant", "group")


def share_url(request: HttpRequest, link: ShareLink) -> str:
    return request.build_absolute_uri(reverse("shared", args=[link.token]))


@login_required
@require_http_methods(["GET", "POST"])
@page_errors
def shares(request: HtmxHttpRequest) -> HttpResponse:
    """GET: a project's share links (admins). POST: create one for a run, point, diff, sweep."""
    if request.method == "POST":
        target = {k: request.POST[k] for k in TARGET_FIELDS if request.POST.get(k)}
        link = sharing.create_share(user=request.user, kind=request.POST.get("kind", ""),
                                    target=target)
        if request.htmx:
            return render(request, "web/shares.html#share-box",
                          {"link": link, "url": share_url(request, link)})
        query = urlencode({"project": link.project.slug, "created": link.token})
        return redirect(f"{reverse('shares')}?{query}")
    admin_of = [p for p in queries.visible_projects(request.user)
                if role_in(request.user, p) == Role.ADMIN]
    if not admin_of:
        return error_page(request, 403, "managing share links needs the admin role in a "
                                        "project")
    newest = (ShareLink.objects.filter(project__in=admin_of).order_by("-created_at")
              .values_list("project__slug", flat=True).first())
    slug = request.GET.get("project") or request.session.get("project") or newest
    project = next((p for p in admin_of if p.slug == slug), admin_of[0])
    links = [{"link": link, "url": share_url(request, link)}
             for link in sharing.shares_for(user=request.user, project=project)[:200]]
    return page_or_partial(request, "web/shares.html", {
        "project": project, "projects": admin_of, "links": links,
        "created": request.GET.get("created", "")}, partials=("share-list",))


@login_required
@require_POST
@page_errors
def revoke(request: HtmxHttpRequest, token: str) -> HttpResponse:
    link = sharing.revoke_share(user=request.user, token=token)
    if (htmx_target(request) or "").startswith("share-box"):
        return render(request, "web/shares.html#share-revoked", {"link": link})
    if request.htmx:
        return render(request, "web/shares.html#share-row",
                      {"item": {"link": link, "url": share_url(request, link)}})
    return redirect(f"{reverse('shares')}?{urlencode({'project': link.project.slug})}")


@require_GET
@page_errors
def shared(request: HtmxHttpRequest, token: str) -> HttpResponse:
    """The shared target, read-only. Works logged out; a revoked token is a 404."""
    link = sharing.resolve_share(token)
    target = link.target
    if link.target_kind in ("run", "point"):
        run = sharing.shared_run(link, target["run"])
        at = None if "at" in request.GET or link.target_kind == "run" else (
            sharing.shared_seq(link, run))
        context = run_context(request, run, readonly=True, at=at)
        context["share"] = link
        return page_or_partial(request, "web/run.html", context,
                               partials=("workspace", "events"))
    if link.target_kind == "diff":
        return _shared_diff(request, link, target["base"], target["variant"])
    return _shared_sweep(request, link)


def _shared_diff(request: HttpRequest, link: ShareLink, base_id: str,
                 variant_id: str) -> HttpResponse:
    base, variant = sharing.shared_run(link, base_id), sharing.shared_run(link, variant_id)
    context = compare_context(request, base, variant, readonly=True)
    context["share"] = link
    return page_or_partial(request, "web/compare.html", context, partials=("path",))


def _shared_sweep(request: HtmxHttpRequest, link: ShareLink) -> HttpResponse:
    group = link.target["group"]
    runs = list(Run.objects.filter(project=link.project, fork_group_id=group).order_by("label"))
    if not runs:
        raise NotFound("this sweep no longer exists")
    detail = forking.SweepGroup.of(group, runs)
    base = sharing.shared_run(link, detail.base_run_id)

    def diff_url(base_run: Run, run: Run) -> str:
        return reverse("shared-compare", args=[link.token, base_run.id, run.id])

    context: dict[str, Any] = sweep_context(request, detail, base, readonly=True,
                                            diff_url=diff_url)
    context["share"] = link
    template = "web/sweep.html#matrix" if request.htmx else "web/sweep.html"
    return render(request, template, context)


@require_GET
@page_errors
def shared_compare(request: HttpRequest, token: str, base_id: str,
                   variant_id: str) -> HttpResponse:
    """A diff inside a shared sweep (or the shared diff itself)."""
    link = sharing.resolve_share(token)
    if link.target_kind not in ("sweep", "diff"):
        raise NotFound("no diff behind this share link")
    return _shared_diff(request, link, base_id, variant_id)
