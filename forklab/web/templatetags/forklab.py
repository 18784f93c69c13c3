"""Formatting for the dashboard's templates: money, durations, counts, ids."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.filter
def usd(value: Decimal | float | int | None) -> str:
    """``$0.0023``; four decimals, more when the amount is smaller than that shows."""
    if value is None or value == "":
        return "unpriced"
    amount = float(value)
    if amount == 0:
        return "$0"
    if abs(amount) < 0.0001:
        return f"{'-' if amount < 0 else ''}${abs(amount):.6f}"
    return f"{'-' if amount < 0 else ''}${abs(amount):.4f}"


@register.filter
def signed_usd(value: float | None) -> str:
    if value is None:
        return "—"
    return ("+" if float(value) > 0 else "") + usd(value)


@register.filter
def ms(value: float | str | None) -> str:
    """A duration in milliseconds, in the unit that reads best (templates may pass "")."""
    if value is None or value == "":
        return "—"
    millis = float(value)
    if abs(millis) < 1:
        return f"{millis:.2f} ms"
    if abs(millis) < 1000:
        return f"{millis:.0f} ms"
    if abs(millis) < 60_000:
        return f"{millis / 1000:.1f} s"
    minutes, seconds = divmod(round(millis / 1000), 60)
    return f"{minutes}m {seconds:02d}s"


@register.filter
def num(value: int | float | str | None) -> str:
    """Thousands separated: ``12,345`` (templates may pass "")."""
    if value is None or value == "":
        return "—"
    return f"{int(value):,}"


@register.filter
def signed(value: int | float | None) -> str:
    if value is None:
        return "—"
    return f"{int(value):+,}"


@register.filter
def short(value: str | None) -> str:
    """The first 8 characters of an id (the full id goes in a title attribute)."""
    return (value or "")[:8]


@register.filter
def get(mapping: dict[str, Any] | None, key: str) -> Any:
    return (mapping or {}).get(key)


@register.simple_tag
def run_duration(run: Any) -> str:
    if run.started_at is None or run.finished_at is None:
        return "—"
    return ms((run.finished_at - run.started_at).total_seconds() * 1000)


@register.simple_tag
def status(value: str) -> SafeString:
    return format_html('<span class="status status-{}">{}</span>', value, value)


@register.simple_tag
def label(value: str | None) -> SafeString:
    """A provenance label chip (reused | live | simulated | changed)."""
    if not value:
        return SafeString("")  # format_html refuses a call without arguments
    return format_html('<span class="label label-{}" title="{}">{}</span>', value,
                       LABEL_HELP.get(value, value), value)


LABEL_HELP = {
    "reused": "served from the recording: the inputs matched",
    "live": "ran for real (a primary run, a node a change targets, or no recording to compare)",
    "simulated": "supplied by a change: nothing ran",
    "changed": "ran for real because its inputs or its configuration differ from the recording",
    "blocked": "a side effect the guard stopped",
    "memo": "served from the recording by memoization",
}
LABELS = ("live", "reused", "changed", "simulated", "blocked", "memo")


@register.inclusion_tag("web/_legend.html")
def legend() -> dict[str, Any]:
    """Every provenance label with what it means."""
    return {"labels": [(name, LABEL_HELP[name]) for name in LABELS]}


@register.simple_tag(takes_context=True)
def step_url(context: Any, run: Any, node: str, occurrence: int) -> str:
    """The step drawer's address for ``node#occurrence`` of ``run`` (through the share link
    when the page is a shared one)."""
    from django.urls import reverse

    share = context.get("share")
    run_id = getattr(run, "id", run)
    if share is not None:
        return reverse("shared-step", args=[share.token, run_id, node, occurrence or 1])
    return reverse("step", args=[run_id, node, occurrence or 1])


@register.simple_tag(takes_context=True)
def step_prefix(context: Any, run: Any) -> str:
    """``step_url`` without node and occurrence (long pages build each link from it)."""
    return step_url(context, run, "NODE", 1).removesuffix("NODE/1/")


@register.simple_tag(takes_context=True)
def pair_prefix(context: Any, base: Any, variant: Any) -> str:
    """``pair_url`` without the index."""
    return pair_url(context, base, variant, 0).removesuffix("0/")


@register.simple_tag(takes_context=True)
def pair_url(context: Any, base: Any, variant: Any, index: int) -> str:
    """The diff's side-by-side view of aligned step ``index``."""
    from django.urls import reverse

    share = context.get("share")
    if share is not None:
        return reverse("shared-compare-step", args=[share.token, base.id, variant.id, index])
    return reverse("compare-step", args=[base.id, variant.id, index])


@register.filter
def served_calls(payload: dict[str, Any] | None) -> dict[str, int]:
    """A ``node.reused`` payload's model calls and their tokens (the live tail's sums)."""
    answers = [a for a in (payload or {}).get("actions") or () if a.get("type") ==
               "agent_result"]
    return {"calls": len(answers),
            "tokens": sum(int(a.get("input_tokens") or 0) + int(a.get("output_tokens") or 0)
                          for a in answers)}
