"""The live fork view: an approval gate answered in the browser, and a cancelled slow tail."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Server, run_id, shot
from tests.browser.test_fork_flow import frames_of

pytestmark = pytest.mark.browser


def test_an_order_fulfilment_fork_pauses_at_the_gate_and_approving_it_finishes_it(
        server: Server, new_page: Any) -> None:
    page: Page = new_page("demo")
    base = run_id(server, "order-fulfilment")
    page.goto(f"/runs/{base}/")
    page.get_by_role("link", name=re.compile(r"^Fork point before approve")).click()
    expect(page.locator("#composer")).to_contain_text("before 'approve' execution 1")
    expect(page.get_by_label("Decision")).to_have_value("")  # pause and ask me
    expect(page.locator("#preflight")).to_contain_text("Live calls")
    frames = frames_of(page)
    page.get_by_role("button", name="Start fork").click()
    expect(page).to_have_url(re.compile(r"/forks/\w+/$"), timeout=30_000)

    panel = page.locator("#fork-panel")
    expect(panel).to_contain_text("Waiting at an approval gate")
    expect(panel).to_contain_text("Release the order and email the receipt?")
    expect(page.locator("#live-status")).to_have_text("paused")
    shot(page, "live-paused")
    panel.get_by_role("button", name="Approve").click()

    expect(page).to_have_url(re.compile(r"/compare/\w+/\w+/$"), timeout=30_000)
    streamed = "".join(frames)
    assert 'data-type="human.answered"' in streamed  # the tail after the gate streamed in
    assert re.search(r'data-type="node.started">.*?send_email', streamed, re.S)
    expect(page.locator(".stats")).to_contain_text("completed → completed")
    expect(page.locator("#calls-h").locator("xpath=../..")).to_contain_text("human")


def test_a_slow_fork_can_be_cancelled_from_its_live_page(
        server: Server, new_page: Any) -> None:
    page: Page = new_page("demo")
    base = run_id(server, "slow-steps", label="slow")
    page.goto(f"/runs/{base}/")
    page.get_by_role("link", name=re.compile(r"^Fork point before outline")).click()
    page.get_by_label("Temperature of outline").fill("1.1")
    expect(page.locator("#preflight")).to_contain_text("temperature of 'outline'")
    expect(page.locator("#preflight-calls")).to_have_text("3")  # memoize off: all three run
    frames = frames_of(page)
    page.get_by_role("button", name="Start fork").click()
    expect(page).to_have_url(re.compile(r"/forks/\w+/$"), timeout=30_000)

    started = page.locator('#live-events tr[data-type="node.started"]')
    expect(started.first).to_be_visible()
    expect(page.locator("#fork-panel")).to_contain_text("Running the tail")
    expect(page.locator('#tail-summary [data-sum="calls"]')).to_have_text("1")  # outline's call
    expect(page.locator('#tail-summary [data-sum="nodes"]')).to_have_text("1")
    shot(page, "live-running")

    # A reconnect resumes after the last row received: no event lost, none repeated.
    fork_id = page.url.rstrip("/").split("/")[-1]
    with page.expect_websocket() as reconnect:
        last = page.evaluate("""url => {
            const rows = document.querySelectorAll("#live-events tr[data-seq]");
            htmx.createWebSocket(url).close();  // what the ws extension calls to reconnect
            return rows[rows.length - 1].dataset.seq;
        }""", f"{server.url.replace('http', 'ws')}/ws/runs/{fork_id}/?after=0&format=html")
    assert f"after={last}&" in reconnect.value.url
    # ... after a back-off: capped exponential with full jitter (a busy server's dropped
    # viewers must not all come back at once, issue 9); the extension resets n on open.
    bounds = page.evaluate("""() => [0, 3, 40].map(n => {
        const delays = Array.from({length: 200}, () => htmx.config.wsReconnectDelay(n));
        return [Math.min(...delays), Math.max(...delays)];
    })""")
    assert [high <= cap for (_, high), cap in zip(bounds, (500, 4000, 30000), strict=True)] \
        == [True] * 3
    assert all(low >= 0 for low, _ in bounds)
    assert bounds[2][1] > 4000  # it grows past the early retries' bound (200 draws: surely)

    page.get_by_role("button", name="Cancel this fork").click()

    expect(page).to_have_url(re.compile(r"/compare/\w+/\w+/$"), timeout=30_000)
    expect(page.locator(".stats")).to_contain_text("completed → cancelled")
    assert 'data-type="run.cancelled"' in "".join(frames)  # streamed in after the click
    expect(page.locator("table.path")).to_contain_text("not reached")  # the tail was cut short


def start_recording(server: Server, graph: str, body: dict[str, Any]) -> str:
    """Queue a primary run through the API (a script's token): the server records it."""
    import json
    import urllib.request

    token = server.manage("drf_create_token", "demo").split()[2]  # "Generated token KEY …"
    request = urllib.request.Request(
        f"{server.url}/api/v1/runs/", method="POST",
        data=json.dumps({"graph": graph, "project": "demo", **body}).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 202
        return str(json.loads(response.read())["id"])


def test_a_primary_still_recording_streams_its_events_onto_its_open_run_page(
        server: Server, new_page: Any) -> None:
    page: Page = new_page("demo")
    frames = frames_of(page)
    recording = start_recording(server, "slow-steps",
                                {"input": {"topic": "tides"}, "label": "watched"})
    page.goto(f"/runs/{recording}/")  # three 1.5 s steps: it is still recording

    expect(page.locator("#run-live")).to_be_visible()
    expect(page.locator("#live-events tr[data-type='node.started']").first).to_be_visible()
    shot(page, "run-page-recording")

    # once it finishes the page reloads into the finished run's page: no live section, no
    # websocket, the whole timeline
    expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)
    expect(page.locator("#run-live")).to_have_count(0)
    expect(page.locator("[ws-connect]")).to_have_count(0)
    expect(page.locator("#workspace .exec")).to_have_count(3)
    streamed = "".join(frames)
    assert 'data-type="run.completed"' in streamed  # recorded after the page opened
    assert 'data-status="completed"' in streamed
    rows = re.findall(r'<tr data-seq="(\d+)"', streamed)
    assert rows and len(rows) == len(set(rows))  # no event streamed twice


def test_a_primary_paused_at_its_gate_is_answered_from_its_run_page(
        server: Server, new_page: Any) -> None:
    """A run recorded through the API pauses at its gate; its run page (its only live view)
    asks the question, refuses an edit of an undeclared key in the form, takes the approval
    and follows the run as it resumes."""
    from forklab.engine.scenarios import SCENARIOS

    page: Page = new_page("demo")
    frames = frames_of(page)
    recording = start_recording(server, "order-fulfilment", {
        "input": SCENARIOS["order-fulfilment"].input, "label": "gated"})
    page.goto(f"/runs/{recording}/")
    gate = page.locator("#run-gate")  # a page opened while still recording reloads into it
    expect(gate).to_contain_text("Release the order and email the receipt?", timeout=30_000)
    expect(page.locator("#run-live-h")).to_have_text("Paused at an approval gate")
    expect(page.locator("#live-status")).to_have_text("paused")

    gate.get_by_text("Edit and approve…").click()
    expect(gate).to_contain_text("This gate lets an answer set no memory keys")
    gate.get_by_label("Memory updates (JSON object)").fill('{"email": "eve@example.com"}')
    gate.get_by_role("button", name="Send as edited").click()
    expect(gate.locator(".notice.bad")).to_contain_text("memory_updates.email is not declared")
    expect(gate.locator(".notice.bad code")).to_have_text("invalid_overrides")
    expect(gate.get_by_label("Memory updates (JSON object)")).to_have_value(
        '{"email": "eve@example.com"}')  # kept, to correct
    shot(page, "run-page-gate-refused")

    gate.get_by_label("Memory updates (JSON object)").fill("")  # every button sends the fields
    gate.get_by_role("button", name="Approve").click()
    # the answer's reply says so, then the status frame reloads the page as the run resumes
    # and it settles into the finished run's page
    expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)
    expect(page.locator("#run-gate")).to_have_count(0)
    expect(page.locator("#run-live")).to_have_count(0)
    expect(page.locator("#workspace .exec[data-node='send_email']")).to_have_count(1)
    assert 'data-type="human.answered"' in "".join(frames)  # streamed in after the click
    shot(page, "run-page-gate-answered")
