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
from forklab.runs.calldiff import call_diff
from forklab.runs.models import Run
from forklab.web.changeview import Before, ChangeView, describe, input_changes
from forklab.web.diffview import MemoryRow, call_list, fold_steps, path_strip, step_counts
from forklab.web.views.common import int_param, page_errors, page_or_partial, roles


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
    is_fork = variant.parent_run_id == base.id
    # a finished fork's diff (while its base is unchanged), explain() and calls are its
    # stored result: what the API serves
    stored = queries.fork_result(variant) if is_fork else None
    result = queries.compare_runs(
        base, variant, diff=stored.diff_against(base.last_seq) if stored else None)
    diff = result.diff
    aligned = diff.path.aligned
    incurred = diff.cost.incurred_usd  # None: the tail called an unpriced model
    inherited = max(0.0, float(variant.cost_usd) - (incurred or 0.0))
    total = max((incurred or 0.0) + inherited, 1e-12)
    return {
        "base": base, "variant": variant, "diff": diff, "readonly": readonly, **access,
        "steps": fold_steps(aligned, start=int_param(request.GET.get("from"))),
        "counts": step_counts(aligned),
        "memory": [MemoryRow.of(key, delta) for key, delta in diff.memory.items()],
        "cost": {"base": float(base.cost_usd), "variant": float(variant.cost_usd),
                 "incurred": incurred, "inherited": inherited,
                 "incurred_pct": round(100 * (incurred or 0.0) / total, 1),
                 "inherited_pct": round(100 * inherited / total, 1),
                 "per_node": sorted(diff.cost.per_node.items())},
        "calls": call_list(stored.calls if stored else result.calls,
                           every=request.GET.get("calls") == "all"),
        "explain": stored.explain if stored else queries.compare_explain(base, variant),
        "forked": queries.forked(variant) if is_fork else None,
        "is_fork": is_fork,
        # a one-call fork is not forked again (one_call_only): its base is, changes combined
        "one_call": queries.one_call(variant),
        "changes": _changes(base, variant, result),
        "strip": path_strip(aligned, diff.divergence.index if diff.divergence else None),
        "call_diff": call_diff(result.base_state, result.variant_state),
    }


def _changes(base: Run, variant: Run, result: queries.Comparison) -> list[ChangeView]:
    """The fork's changes as old → new; for two unrelated runs, how their inputs differ."""
    if variant.parent_run_id != base.id:
        view = input_changes(base.input or {}, variant.input or {})
        return [view] if view.lines else []
    prefix = queries.fork_prefix(variant.id)
    try:
        graph = queries.graph_of(base)
    except ForklabError:
        graph = None
    inherited = result.variant_state.prefix_executions
    before = Before(graph=graph, memory=prefix.memory, input=prefix.input,
                    after_point=result.base_state.executions[inherited:])
    return describe(parse_changes(variant.fork_mutations or []), before)
