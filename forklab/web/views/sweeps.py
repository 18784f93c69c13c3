"""Sweeps: launch several named variants from one point (``forking.start_sweep``), and the
live variants-by-outcome matrix at ``/sweeps/<group>/`` with each cell linking to its diff."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from forklab.engine.errors import ForklabError, OneCallOnly
from forklab.engine.fork.changes import Change, change, parse_changes
from forklab.engine.fork.wire import Policy, RunDiffWire, SweepSpec, build
from forklab.runs import forking, queries
from forklab.runs.engine_env import build_environment
from forklab.runs.models import Run
from forklab.web import timeline
from forklab.web.composer import AgentTarget, agent_targets, models_for
from forklab.web.views.common import (
    HtmxHttpRequest,
    forkable_run,
    htmx_target,
    int_param,
    page_errors,
    roles,
)

DEFAULT_VARIANTS = 3
MAX_VARIANTS = 12


@dataclass
class Launcher:
    run: Run
    seq: int
    label: str
    targets: list[AgentTarget]
    target: AgentTarget | None
    models: list[str]


def _launcher(run: Run, at: int | None, target_name: str | None) -> Launcher:
    tl = timeline.build(run, at=at)
    seq = at if at in tl.points else (tl.points[0] if tl.points else 0)
    after = tl.after(seq)
    targets = agent_targets(queries.graph_of(run))
    first = next((t for t in targets if after is not None and t.node == after.node), None)
    target = next((t for t in targets if t.target == target_name), first or
                  (targets[0] if targets else None))
    known = sorted(set(build_environment().prices.models()) | {t.model for t in targets})
    models = list(models_for(target.provider, known, target.model)) if target else known
    return Launcher(run=run, seq=seq, label=timeline.point_label(seq, after), targets=targets,
                    target=target, models=models)


def _variants(launcher: Launcher, data: QueryDict, count: int
              ) -> tuple[dict[str, list[Change]], dict[str, str], list[dict[str, Any]]]:
    """Named change lists from the form, field errors, and the rows to show again.

    A fresh form names its rows ``variant-1`` …; a submitted one keeps what was sent (an
    emptied name leaves that row out)."""
    fresh = not any(key.endswith("-name") for key in data)
    variants: dict[str, list[Change]] = {}
    errors: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    t = launcher.target
    for i in range(1, count + 1):
        p = f"v{i}"
        row: dict[str, Any] = {"i": i, "name": data.get(f"{p}-name", f"variant-{i}" if fresh else "").strip(),
               "model": data.get(f"{p}-model", t.model if t else ""),
               "temperature": data.get(f"{p}-temperature", t.temperature if t else ""),
               "prompt": data.get(f"{p}-prompt", t.system_prompt if t else "").replace("\r\n",
                                                                                        "\n"),
               "changes": data.get(f"{p}-changes", "")}
        rows.append(row)
        if not row["name"]:
            continue
        if row["name"] in variants:
            errors[f"{p}-name"] = f"two variants are named {row['name']!r}"
            continue
        variants[row["name"]] = _changes(t, row, p, errors)
    for row in rows:
        row["error"] = " ".join(v for k, v in errors.items() if k.startswith(f"v{row['i']}-"))
    return variants, errors, rows


def _changes(t: AgentTarget | None, row: dict[str, Any], p: str,
             errors: dict[str, str]) -> list[Change]:
    """A row's changes, built by the engine's builders; a bad value is an error on its field
    (the free-form ``changes`` field takes any kind in its JSON form)."""
    changes: list[Change] = []

    def add(field: str, build: Callable[[], Change | list[Change]]) -> None:
        try:
            built = build()
        except ForklabError as exc:
            errors[f"{p}-{field}"] = exc.message
        else:
            changes.extend(built if isinstance(built, list) else [built])

    if t is not None:
        if row["model"] and row["model"] != t.model:
            add("model", lambda: change.model(t.target, row["model"]))
        if row["prompt"] != t.system_prompt:
            add("prompt", lambda: change.prompt(t.target, row["prompt"]))
        try:
            temperature = float(row["temperature"])
        except (TypeError, ValueError):
            errors[f"{p}-temperature"] = f"expected a number, got {row['temperature']!r}"
        else:
            if temperature != t.temperature:
                add("temperature", lambda: change.temperature(t.target, temperature))
    if row["changes"].strip():
        try:
            extra = json.loads(row["changes"])
        except json.JSONDecodeError as exc:
            errors[f"{p}-changes"] = f"not valid JSON: {exc.msg}"
        else:
            add("changes", lambda: parse_changes(extra))
    return changes


def _spec(launcher: Launcher, variants: dict[str, list[Change]], data: QueryDict) -> SweepSpec:
    """The sweep request the form describes: the engine's SweepSpec built from the typed
    changes, validated as the API validates its body."""
    return build(SweepSpec, base_run=launcher.run.id, at={"sequence": launcher.seq},
                 variants=variants, label=data.get("label", "").strip(),
                 policy=Policy(memoize=data.get("memoize") == "on"))


@login_required
@require_http_methods(["GET", "POST"])
@page_errors
def launch(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = sweepable_run(request, run_id)
    data: QueryDict = request.POST if request.method == "POST" else request.GET
    refresh = request.method == "POST" and bool(data.get("refresh"))
    if refresh:  # another agent chosen: each row starts again from that agent's settings
        data = data.copy()
        for key in [k for k in data if k.endswith(("-model", "-temperature", "-prompt"))]:
            del data[key]
    count = min(max(int_param(data.get("variants")) or DEFAULT_VARIANTS, 1), MAX_VARIANTS)
    launcher = _launcher(run, int_param(data.get("at")), data.get("target"))
    variants, errors, rows = _variants(launcher, data, count)
    if request.method == "POST" and not refresh and not errors:
        if not variants:
            errors["form"] = "name at least one variant"
        else:
            try:
                group = forking.start_sweep(user=request.user,
                                            spec=_spec(launcher, variants, data))
            except ForklabError as exc:
                errors[_variant_field(exc, variants)] = exc.message
            else:
                url = reverse("sweep", args=[group])
                return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    context = {"launcher": launcher, "rows": rows, "errors": errors, "count": count,
               "memoize": data.get("memoize") == "on", "label": data.get("label", ""),
               **roles(request, run.project)}
    status = 422 if request.method == "POST" and not refresh else 200
    return render(request, "web/sweep_launch.html", context, status=status)


def sweepable_run(request: HttpRequest, run_id: str) -> Run:
    """A run this page can sweep: forkable, and not imported from a trace — the launcher's
    points are node boundaries, which an imported run does not fork at (its sweeps vary one
    call, or fork its workflow base: through the CLI or the API, ``one_call_only`` here)."""
    run = forkable_run(request, run_id)
    if run.trace_id:
        raise OneCallOnly(
            f"run {run.id!r} was imported from a trace: this page sweeps node points, which "
            "an imported run does not fork at. Fork one call from its run page, or sweep "
            "variants of one call with `forklab sweep RUN --at before:CALL --variant "
            "NAME=JSON` (POST /api/v1/sweeps/)", run_id=run.id, trace_id=run.trace_id)
    return run


def _variant_field(exc: ForklabError, variants: dict[str, list[Change]]) -> str:
    names = list(variants)
    label = exc.context.get("variant") or exc.context.get("name")
    if label in names:
        return f"v{names.index(label) + 1}-changes"
    return "form"


@login_required
@require_POST
@page_errors
def estimate(request: HttpRequest, run_id: str) -> HttpResponse:
    """What the sweep would spend (``forking.estimate_sweep``), refreshed as the form changes."""
    run = sweepable_run(request, run_id)
    count = min(max(int_param(request.POST.get("variants")) or DEFAULT_VARIANTS, 1),
                MAX_VARIANTS)
    launcher = _launcher(run, int_param(request.POST.get("at")), request.POST.get("target"))
    variants, errors, _ = _variants(launcher, request.POST, count)
    result = None
    if variants and not errors:
        try:
            result = forking.estimate_sweep(
                user=request.user, spec=_spec(launcher, variants, request.POST)).to_wire()
        except ForklabError as exc:
            errors["form"] = exc.message
    live_calls = sum(v["live_calls"] for v in (result or {}).get("variants", {}).values())
    return render(request, "web/sweep_launch.html#estimate",
                  {"result": result, "errors": errors, "variants": variants,
                   "live_calls": live_calls})


@login_required
@require_GET
@page_errors
def sweep(request: HttpRequest, group_id: str) -> HttpResponse:
    detail = forking.sweep_detail(user=request.user, group_id=group_id)
    base = queries.get_run(detail.base_run_id, user=request.user)
    context = sweep_context(request, detail, base, readonly=False)
    template = "web/sweep.html#matrix" if htmx_target(request) == "matrix" else "web/sweep.html"
    return render(request, template, context)


@dataclass(frozen=True, slots=True)
class VariantRow:
    """One variant of the matrix: its run, its diff page and — once it finished — its diff."""

    name: str
    run: Run
    url: str
    diff: RunDiffWire | None


def sweep_context(request: HttpRequest, detail: forking.SweepGroup, base: Run, *,
                  readonly: bool, diff_url: Callable[[Run, Run], str] | None = None
                  ) -> dict[str, Any]:
    """Rows of the variants-by-outcome matrix; columns are the memory keys any variant changed."""
    rows: list[VariantRow] = []
    keys: list[str] = []
    for name, run in sorted(detail.variants.items()):
        diff = (queries.compare_runs(base, run).diff if run.finished and run.last_seq
                else None)
        rows.append(VariantRow(name=name, run=run, url=(diff_url or _diff_url)(base, run),
                               diff=diff))
        keys += [k for k in (diff.memory if diff else ()) if k not in keys]
    unfinished = any(not r.run.finished for r in rows)
    access = {"can_fork": False, "is_admin": False} if readonly else roles(request,
                                                                           base.project)
    return {"detail": detail, "base": base, "rows": rows, "keys": keys, "live": unfinished,
            "readonly": readonly, **access,
            "incurred": _total([r.run.incurred_cost_usd for r in rows])}


def _diff_url(base: Run, run: Run) -> str:
    return reverse("compare", args=[base.id, run.id])


def _total(amounts: list[Any]) -> float | None:
    """The variants' total spend; None (shown "unpriced") when one is unknown."""
    return None if None in amounts else sum(float(a) for a in amounts)
