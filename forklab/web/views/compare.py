"""The diff page ``/compare/<base>/<variant>/``: aligned paths side by side, memory deltas with
word-level text diffs, cost incurred vs inherited, terminal status, suppressed effects, the
tail's calls with their provenance labels, and the copyable ``explain()`` block."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from forklab.engine.errors import ForklabError
from forklab.engine.fork.changes import parse_changes
from forklab.runs import queries
from forklab.runs.models import Run
from forklab.web.changeview import Before, ChangeView, describe, input_changes
from forklab.web.textdiff import as_text, pieces_html, similarity, word_diff
from forklab.web.views.common import int_param, page_errors, page_or_partial, roles

CONTEXT_STEPS = 2
"""Unchanged steps shown on each side of a change; longer unchanged stretches fold."""
STEPS_PER_PAGE = 120


@login_required
@require_GET
@page_errors
def compare(request: HttpRequest, base_id: str, variant_id: str) -> HttpResponse:
    base = queries.get_run(base_id, user=request.user)
    variant = queries.get_run(variant_id, user=request.user)
    context = compare_context(request, base, variant, readonly=False)
    return page_or_partial(request, "web/compare.html", context, partials=("path",))


def compare_context(request: HttpRequest, base: Run, variant: Run, *,
                    readonly: bool) -> dict[str, Any]:
    access = {"can_fork": False, "is_admin": False} if readonly else roles(request,
                                                                           base.project)
    unstarted = [run for run in (base, variant) if run.last_seq == 0]
    if unstarted:  # a queued run (or one that never ran) has no state to compare yet
        return {"base": base, "variant": variant, "readonly": readonly, **access,
                "unstarted": unstarted, "is_fork": variant.parent_run_id == base.id}
    result = queries.compare_runs(base, variant)
    is_fork = variant.parent_run_id == base.id
    # a finished fork's explain() and calls are its stored result: what the API serves
    stored = queries.fork_result(variant) if is_fork else None
    diff = result["diff"]
    incurred = diff["cost"]["incurred_usd"]  # None: the tail called an unpriced model
    inherited = max(0.0, float(variant.cost_usd) - (incurred or 0.0))
    total = max((incurred or 0.0) + inherited, 1e-12)
    return {
        "base": base, "variant": variant, "diff": diff, "readonly": readonly, **access,
        "steps": fold_steps(diff["path"]["aligned"], start=int_param(request.GET.get("from"))),
        "counts": _counts(diff["path"]["aligned"]),
        "memory": [_memory_row(key, delta) for key, delta in diff["memory"].items()],
        "cost": {"base": float(base.cost_usd), "variant": float(variant.cost_usd),
                 "incurred": incurred, "inherited": inherited,
                 "incurred_pct": round(100 * (incurred or 0.0) / total, 1),
                 "inherited_pct": round(100 * inherited / total, 1),
                 "per_node": sorted(diff["cost"]["per_node"].items())},
        "calls": _calls([c.to_wire() for c in stored.calls] if stored else result["calls"],
                        every=request.GET.get("calls") == "all"),
        "explain": stored.explain if stored else queries.compare_explain(base, variant),
        "forked": queries.forked(variant) if is_fork else None,
        "is_fork": is_fork,
        "changes": _changes(base, variant, result),
        "strip": path_strip(diff["path"]["aligned"], (diff["divergence"] or {}).get("index")),
    }


def _changes(base: Run, variant: Run, result: dict[str, Any]) -> list[ChangeView]:
    """The fork's changes as old → new; for two unrelated runs, how their inputs differ."""
    if variant.parent_run_id != base.id:
        view = input_changes(base.input or {}, variant.input or {})
        return [view] if view.lines else []
    prefix = queries.fork_prefix(variant.id)
    inherited = (result["variant_state"].fork or {}).get("prefix_executions", 0)
    try:
        graph = queries.graph_of(base)
    except ForklabError:
        graph = None
    before = Before(graph=graph, memory=prefix["memory"], input=prefix["input"],
                    after_point=result["base_state"].executions[inherited:])
    return describe(parse_changes(variant.fork_mutations or []), before)


STRIP_STEPS = 40
"""The path strip shows this many steps, centred on the first divergence."""


def path_strip(aligned: list[dict[str, Any]], divergence: int | None) -> dict[str, Any]:
    """A window of the aligned path around the first divergence (the start when none)."""
    centre = divergence or 0
    start = max(0, min(centre - STRIP_STEPS // 2, len(aligned) - STRIP_STEPS))
    end = min(len(aligned), start + STRIP_STEPS)
    return {"steps": [{"index": i, **aligned[i]} for i in range(start, end)],
            "before": start, "after": len(aligned) - end, "divergence": divergence}


CALLS_LISTED = 40
"""Up to this many tail calls are listed one by one; more are grouped by node and label."""


def _calls(calls: list[dict[str, Any]], *, every: bool) -> dict[str, Any]:
    if every or len(calls) <= CALLS_LISTED:
        return {"rows": calls, "grouped": False, "total": len(calls)}
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for call in calls:
        key = (call["node"], call["role"], call["kind"], call["label"], call["model"])
        group = groups.setdefault(key, {**call, "count": 0, "input_tokens": 0,
                                        "output_tokens": 0, "cost_usd": 0.0})
        group["count"] += 1
        group["input_tokens"] += call["input_tokens"]
        group["output_tokens"] += call["output_tokens"]
        if call["cost_usd"] is None or group["cost_usd"] is None:
            group["cost_usd"] = None
        else:
            group["cost_usd"] += call["cost_usd"]
    return {"rows": list(groups.values()), "grouped": True, "total": len(calls)}


def _counts(aligned: list[dict[str, Any]]) -> dict[str, int]:
    counts = {"same": 0, "changed": 0, "inserted": 0, "skipped": 0, "not_reached": 0}
    for step in aligned:
        counts["not_reached" if step.get("not_reached") else step["op"]] += 1
    return counts


def fold_steps(aligned: list[dict[str, Any]], *, start: int | None = None) -> dict[str, Any]:
    """The aligned path for display: unchanged stretches folded to a count, one page long."""
    keep = [False] * len(aligned)
    for i, step in enumerate(aligned):
        if step["op"] != "same" and not step.get("not_reached"):
            for j in range(max(0, i - CONTEXT_STEPS), min(len(aligned), i + CONTEXT_STEPS + 1)):
                keep[j] = True
    if len(aligned) <= 2 * CONTEXT_STEPS + 1:
        keep = [True] * len(aligned)
    rows: list[dict[str, Any]] = []
    folded: list[dict[str, Any]] = []

    def fold() -> None:
        if folded:  # one row for a stretch: unchanged steps, or steps the variant never reached
            unreached = all(step.get("not_reached") for step in folded)
            rows.append({"fold": len(folded), "not_reached": unreached})
            folded.clear()

    for i, step in enumerate(aligned):
        if keep[i]:
            fold()
            rows.append({"index": i, **step})
        else:
            folded.append(step)
    fold()
    start = max(0, start or 0)
    page = rows[start:start + STEPS_PER_PAGE]
    return {"rows": page, "start": start, "total_rows": len(rows),
            "next": start + STEPS_PER_PAGE if start + STEPS_PER_PAGE < len(rows) else None,
            "prev": max(0, start - STEPS_PER_PAGE) if start else None}


def _memory_row(key: str, delta: dict[str, Any]) -> dict[str, Any]:
    row = {"key": key, **delta, "base_text": as_text(delta.get("base")),
           "variant_text": as_text(delta.get("variant")),
           "json": not isinstance(delta.get("base") if delta["op"] == "removed"
                                  else delta.get("variant"), str)}
    if delta["op"] == "changed":
        row["diff_html"] = pieces_html(word_diff(delta.get("base"), delta.get("variant")))
        row["similarity"] = round(100 * similarity(delta.get("base"), delta.get("variant")))
    return row
