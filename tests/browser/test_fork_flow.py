"""The main flow in a real browser: marker → composer → preflight → fork → live → diff."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Server, run_id, shot

pytestmark = pytest.mark.browser


def frames_of(page: Page) -> list[str]:
    """Every websocket frame the page receives (the live view's stream)."""
    frames: list[str] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(
        payload if isinstance(payload, str) else payload.decode())))
    return frames


def capture(page: Page, url: re.Pattern[str]) -> list[str]:
    """The HTML of every page matching ``url`` the browser loads, read as it arrives (before
    the page turns into the next one). Not ``page.route``: a routed document loses its
    local-network permission, and chromium then refuses its websocket."""
    bodies: list[str] = []

    def read(response: Any) -> None:
        if url.search(response.url) and response.request.resource_type == "document":
            bodies.append(response.text())

    page.on("response", read)
    return bodies


def test_a_prompt_change_before_write_streams_its_tail_and_ends_in_the_diff(
        server: Server, new_page: Any) -> None:
    page: Page = new_page("demo")
    base = run_id(server, "research-write")
    page.goto(f"/runs/{base}/")
    expect(page.locator("h1")).to_contain_text("research-write")
    shot(page, "run-page")

    page.get_by_role("link", name=re.compile(r"^Fork point before write")).click()
    composer = page.locator("#composer")
    expect(composer).to_contain_text("before 'write' execution 1")
    expect(page).to_have_url(re.compile(r"\?at=6$"))
    prompt = composer.get_by_label("System prompt of write")
    expect(prompt).to_have_value(re.compile("science writer"))
    prompt.fill("You are a poet. Explain it in four rhyming lines.")
    expect(page.locator("#preflight")).to_contain_text("prompt of 'write'")
    expect(page.locator("#preflight-calls")).to_have_text("1")
    shot(page, "composer")

    frames, pages = frames_of(page), capture(page, re.compile(r"/forks/\w+/$"))
    page.get_by_role("button", name="Start fork").click()
    expect(page).to_have_url(re.compile(r"/compare/\w+/\w+/$"), timeout=30_000)  # the live view turned into the diff
    tail = "".join(pages) + "".join(frames)
    assert re.search(r'<tr data-seq="\d+" data-type="node.started">(?:(?!</tr>).)*?'
                     r'<td class="nowrap">(?:<a [^>]*>)?write', tail, re.S)  # write starting
    assert 'data-type="run.completed"' in tail

    expect(page.locator(".pathline")).to_contain_text("research")
    expect(page.locator(".pathline .op-changed")).to_have_text("write@fork")
    expect(page.locator("#key-draft")).to_contain_text("changed")
    expect(page.locator("#key-draft ins").first).to_be_visible()
    expect(page.locator("#explain")).to_contain_text("write@fork")
    shot(page, "diff")


def test_pages_read_on_a_narrow_screen_and_markers_work_from_the_keyboard(
        server: Server, new_page: Any) -> None:
    base = run_id(server, "review-loop")
    wide: Page = new_page("demo")
    wide.goto("/")
    expect(wide.locator("#runs-table tbody tr").first).to_be_visible()
    shot(wide, "runs")
    wide.goto(f"/runs/{base}/")
    marker = wide.get_by_role("link", name=re.compile(r"^Fork point before review execution 2"))
    marker.focus()
    wide.keyboard.press("Enter")
    expect(wide.locator("#composer")).to_contain_text("before 'review' execution 2")
    expect(wide.locator("#workspace .fp.selected")).to_have_count(1)
    expect(wide.locator("#workspace .fp.selected a")).to_be_focused()  # focus stays on it

    narrow: Page = new_page("demo", width=390, height=844)
    for path, name in ((f"/runs/{base}/?at={wide.url.split('at=')[1]}", "run-page-narrow"),
                       ("/", "runs-narrow")):
        narrow.goto(path)
        overflow = narrow.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{path} scrolls sideways by {overflow}px on a 390px screen"
        shot(narrow, name)
