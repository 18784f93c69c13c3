"""Sweeps, fork links between teammates, and read-only share links, in a real browser."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Server, run_id, shot

pytestmark = pytest.mark.browser


def test_a_sweep_of_three_variants_shows_three_finished_cells_linking_to_diffs(
        server: Server, new_page: Any) -> None:
    page: Page = new_page("demo")
    base = run_id(server, "research-write")
    page.goto(f"/runs/{base}/?at=6")
    page.get_by_role("link", name="Sweep…").click()
    expect(page.locator("h1")).to_have_text("Sweep from seq 6")
    for i, prompt in ((2, "You are a poet."), (3, "You write for children aged eight.")):
        page.get_by_label(f"Variant {i} name").fill(f"style-{i}")
        page.locator(f"#v{i}-prompt").fill(prompt)
    page.get_by_label("Variant 1 name").fill("control")
    expect(page.locator("#sweep-estimate")).to_contain_text("style-3: 1 live calls")
    page.get_by_role("button", name="Start sweep").click()
    expect(page).to_have_url(re.compile(r"/sweeps/\w+/$"), timeout=30_000)

    rows = page.locator("#matrix tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator('#matrix tbody tr[data-status="completed"]')).to_have_count(3)
    expect(page.locator("#matrix")).to_contain_text("all finished")
    for name in ("control", "style-2", "style-3"):
        link = page.locator(f'#matrix tr[data-variant="{name}"] td a').first
        expect(link).to_have_attribute("href", re.compile(rf"^/compare/{base}/\w+/$"))
    expect(page.locator('#matrix tr[data-variant="style-2"]')).to_contain_text("write@fork")
    shot(page, "sweep")

    page.locator('#matrix tr[data-variant="style-3"] td a').first.click()
    expect(page.locator("h1")).to_have_text("What became different")
    expect(page.locator("#key-draft")).to_be_visible()


def test_a_fork_link_opens_the_composer_prefilled_for_a_teammate_and_404s_for_outsiders(
        server: Server, new_page: Any) -> None:
    base = run_id(server, "research-write")
    author: Page = new_page("demo")
    author.goto(f"/runs/{base}/?at=6")
    author.get_by_label("System prompt of write").fill("Explain it like a sports commentator.")
    expect(author.locator("#preflight")).to_contain_text("prompt of 'write'")
    link = author.locator("#fork-link-copy").get_attribute("data-copy") or ""
    assert re.search(rf"/runs/{base}/fork/\?at=6&changes=[\w-]+$", link), link

    teammate: Page = new_page("bob")
    teammate.goto(link)
    expect(teammate.locator("#composer")).to_contain_text("Opened from a fork link")
    expect(teammate.get_by_label("System prompt of write")).to_have_value(
        "Explain it like a sports commentator.")
    expect(teammate.locator("#preflight")).to_contain_text("prompt of 'write'")
    shot(teammate, "fork-link-composer")

    outsider: Page = new_page("eve")
    response = outsider.goto(link)
    assert response is not None and response.status == 404
    response = outsider.goto(f"/runs/{base}/")
    assert response is not None and response.status == 404

    viewer: Page = new_page("vera")
    viewer.goto(f"/runs/{base}/?at=6")
    expect(viewer.locator("#inspector")).to_contain_text("State at seq 6")
    expect(viewer.get_by_role("link", name="Fork…")).to_have_count(0)
    expect(viewer.locator("#composer")).to_have_count(0)


def test_a_read_only_share_link_works_logged_out_without_fork_controls_until_revoked(
        server: Server, new_page: Any) -> None:
    base = run_id(server, "research-write")
    admin: Page = new_page("demo")
    admin.goto(f"/runs/{base}/")
    admin.get_by_role("button", name="Share read-only").click()
    url = admin.get_by_label("Read-only share link").input_value()
    assert re.search(r"/s/[\w-]+/$", url), url

    anonymous: Page = new_page()
    response = anonymous.goto(url)
    assert response is not None and response.status == 200
    expect(anonymous.locator(".banner")).to_contain_text("Read-only shared view")
    expect(anonymous.locator("h1")).to_contain_text("research-write")
    for control in ("Fork…", "Sweep…", "Share read-only", "Start fork"):
        expect(anonymous.get_by_text(control, exact=True)).to_have_count(0)
    anonymous.get_by_role("link", name=re.compile(r"^Fork point before write")).click()
    expect(anonymous.locator("#inspector")).to_contain_text("State at seq 6")
    expect(anonymous.locator("#composer")).to_have_count(0)
    shot(anonymous, "shared-run")

    admin.get_by_role("button", name="Revoke").click()
    expect(admin.locator("#share-slot")).to_contain_text("is revoked: it now answers 404")
    response = anonymous.goto(url)
    assert response is not None and response.status == 404
