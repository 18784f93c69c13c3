"""A run imported from an OpenTelemetry trace, forked in a real browser (SPEC §8): the
timeline's markers only inspect, a replayable turn's "fork before" opens the composer of
that one call, a model change (the scripted provider: no network) is estimated and started,
and the compare page shows the old and the new reply with the trace's later calls marked
not re-executed. A turn traced without its tool definitions offers no fork and says why."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Server, shot

pytestmark = pytest.mark.browser

GOLDEN = Path(__file__).resolve().parents[1] / "traces" / "golden"
TURN = "weather_agent#1/turn:1"


def _import(server: Server, case: str) -> str:
    """The run ``case``'s golden OTLP export imports into, in project demo."""
    out = server.manage("import", str(GOLDEN / f"{case}.otlp.json"), "--project", "demo")
    return out.splitlines()[0].strip()


def test_a_replayable_turn_forks_with_another_model_and_the_compare_page_shows_both_replies(
        server: Server, new_page: Any) -> None:
    run = _import(server, "openinference")
    page: Page = new_page("bob")
    page.goto(f"/runs/{run}/")
    expect(page.locator("[data-imported-forks='one_call']")).to_contain_text(
        "forks of an imported run re-ask one model call")
    expect(page.locator("#workspace .fp .txt").first).to_contain_text("inspect before")
    expect(page.locator(f"#imported-forks li[data-call='{TURN}'] a.forkmark")).to_be_visible()
    shot(page, "imported-1-run")

    page.locator("#workspace .exec[data-node='weather_agent'] .steplink").click()
    turn = page.locator(f"#drawer .conversation .turn[data-call='{TURN}']")
    expect(turn.locator("> .actions a[data-action='rerun']")).to_have_text("rerun live")
    expect(turn.locator("> header .chip.replay")).to_have_text("replayable")
    turn.locator("> a.forkmark").click()

    composer = page.locator("#composer[data-call-composer='one_call']")
    expect(composer).to_contain_text(f"Fork before {TURN}")
    expect(composer.locator("textarea[name='call-messages']")).to_have_value(
        re.compile("Weather in Paris"))
    composer.get_by_label("Model", exact=True).fill("scripted-small")
    expect(composer.locator("#preflight-calls")).to_have_text("1")
    expect(composer.locator("#preflight")).to_contain_text(f"model of '{TURN}' -> scripted-small")
    shot(page, "imported-2-composer")
    composer.get_by_role("button", name="Start fork").click()

    expect(page).to_have_url(re.compile(r"/compare/[\w-]+/\w+/$"), timeout=30_000)
    calls = page.locator(".calldiff")
    expect(calls.locator(f"tr[data-call='{TURN}'][data-op='changed']")).to_have_count(1)
    for later in (f"{TURN}/tool:1", "weather_agent#1/turn:2"):
        row = calls.locator(f"tr[data-call='{later}'][data-op='not_reexecuted']")
        expect(row).to_contain_text("not re-executed")
    expect(calls.locator("tr[data-call='weather_agent#1/turn:2'] td").nth(3)).to_contain_text(
        "Results: get_weather=sunny")  # the base's reply, beside nothing asked again
    shot(page, "imported-3-compare")


def test_an_inspect_only_turn_offers_no_fork_and_names_the_capture_setting(
        server: Server, new_page: Any) -> None:
    run = _import(server, "genai")
    page: Page = new_page("bob")
    page.goto(f"/runs/{run}/")
    expect(page.locator(f"#imported-forks li[data-call='{TURN}']")).to_have_attribute(
        "data-forkable", "false")
    page.locator("#workspace .exec[data-node='weather_agent'] .steplink").click()
    turn = page.locator(f"#drawer .conversation .turn[data-call='{TURN}']")
    expect(turn.locator(".chip.replay").first).to_contain_text(
        "inspect-only — missing: tool definitions")
    expect(turn.locator(f"[data-inspect-only='{TURN}']")).to_be_visible()
    expect(turn.locator("> a.forkmark")).to_have_count(0)
    expect(turn.locator("a[data-action='rerun']")).to_have_count(0)
    shot(page, "imported-4-inspect-only")
