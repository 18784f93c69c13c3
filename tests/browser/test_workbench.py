"""The debugging workbench in a real browser: a failed run's failing step read in the drawer,
forked at the failure with a tool override, its diff read step by step; a long run filtered
to one node and jumped to its first failure; two arbitrary runs compared from the runs list."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Server, run_id, shot

pytestmark = pytest.mark.browser


def test_a_failed_run_is_read_forked_at_its_failure_and_diffed_step_by_step(
        server: Server, new_page: Any) -> None:
    page: Page = new_page("demo")
    failed = run_id(server, "flaky-tool")
    page.goto(f"/runs/{failed}/")
    expect(page.locator("#run-status")).to_contain_text("failed")
    shot(page, "workbench-1-failed-run")

    page.locator("#workspace .exec.st-failed .steplink").click()
    drawer = page.locator("#drawer")
    expect(drawer).to_contain_text("upstream inventory service timed out")
    expect(drawer).to_contain_text('"region": "eu-west"')  # the arguments it was called with
    expect(page.locator("#step-detail")).to_be_focused()
    shot(page, "workbench-2-failing-step")

    drawer.get_by_role("link", name="Fork at the failure").click()
    composer = page.locator("#composer")
    expect(composer).to_contain_text("before 'fetch_inventory' execution 1")
    result = composer.get_by_label("Result, as JSON")
    result.fill(json.dumps({"inventory": {"region": "eu-west", "in_stock": 7}}))
    expect(page.locator("#preflight")).to_contain_text("tool result of 'fetch_inventory'")
    shot(page, "workbench-3-tool-override")
    page.get_by_role("button", name="Start fork").click()
    expect(page).to_have_url(re.compile(r"/compare/\w+/\w+/$"), timeout=30_000)

    changes = page.locator(".changes")
    expect(changes).to_contain_text("tool result of fetch_inventory")
    expect(changes.locator(".side-right")).to_contain_text('"in_stock": 7')
    row = page.locator("table.path tbody tr", has_text="fetch_inventory")
    row.get_by_role("link", name=re.compile(r"side by side")).click()
    pair = page.locator("#drawer .step-detail.pair")
    expect(pair).to_contain_text("Base")
    expect(pair).to_contain_text("Variant")
    expect(pair.locator(".pair-row.differs").first).to_be_visible()
    shot(page, "workbench-4-diff-side-by-side")


def test_a_long_run_filtered_to_one_node_jumps_to_its_first_failure(
        server: Server, new_page: Any) -> None:
    page: Page = new_page("demo")
    long = run_id(server, "long-loop", label="long")
    page.goto(f"/runs/{long}/")
    expect(page.locator("#timeline-h")).to_be_visible()
    filters = page.locator("form.tl-filters")
    filters.get_by_label("Node").select_option("tick")
    expect(page).to_have_url(re.compile(r"node=tick"))
    expect(page.locator("#workspace .exec[data-node='think']")).to_have_count(0)
    filters = page.locator("form.tl-filters")
    filters.get_by_role("button", name="First failure").click()
    jumped = page.locator("#workspace .exec.jumped")
    expect(jumped).to_have_attribute("data-node", "tick")
    expect(jumped).to_have_attribute("data-status", "failed")
    expect(jumped.locator(".steplink")).to_be_focused()
    expect(page).to_have_url(re.compile(r"node=tick.*jump=failed|jump=failed.*node=tick"))
    expect(page.locator("#composer")).to_contain_text("before 'tick'")
    shot(page, "workbench-5-long-run-first-failure")

    page.reload()  # the filtered, jumped view is a permalink
    expect(page.locator("#workspace .exec.jumped")).to_have_attribute("data-status", "failed")


def test_two_arbitrary_runs_are_compared_from_the_runs_list(server: Server,
                                                            new_page: Any) -> None:
    page: Page = new_page("demo")
    vaccines = run_id(server, "research-write", label="demo")
    tides = run_id(server, "research-write", label="tides")
    page.goto("/")
    page.get_by_label(f"Compare run {vaccines[:8]}").check()
    page.get_by_label(f"Compare run {tides[:8]}").check()
    shot(page, "workbench-6-runs-ticked", full_page=False)
    page.get_by_role("button", name="Compare the two ticked runs").click()
    expect(page).to_have_url(re.compile(rf"/compare/({vaccines}/{tides}|{tides}/{vaccines})/$"))
    changes = page.locator(".changes")
    expect(changes).to_contain_text("How the inputs differ")
    expect(changes.locator("ins")).to_contain_text("tides")
    expect(page.locator(".legend-labels")).to_have_count(1)
    shot(page, "workbench-7-compare-two-runs")
