"""A support agent's run read as a conversation in a real browser: the assist step opens as
a thread of turns and tool calls, "edit reply" lands on the composer before that call,
prefilled with the reply change, and the fork with an edited reply diffs call by call."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Server, run_id, shot

pytestmark = pytest.mark.browser


def test_a_support_agent_thread_edit_reply_forks_before_the_call_and_diffs_call_by_call(
        server: Server, new_page: Any) -> None:
    page: Page = new_page("demo")
    run = run_id(server, "support-agent")
    page.goto(f"/runs/{run}/")
    page.locator("#workspace .exec[data-node='assist'] .steplink").click()
    thread = page.locator("#drawer .conversation")
    expect(thread).to_be_visible()
    expect(thread.locator(".turn")).to_have_count(3)
    refund = thread.locator(".toolcall[data-tool='issue_refund']")
    expect(refund).to_contain_text('"order_id": "A-1001"')
    expect(refund).to_contain_text('"status": "issued"')
    expect(refund).to_contain_text("write")
    expect(thread.locator("a.forkmark")).to_have_count(6)
    shot(page, "conversation-1-thread")

    second = thread.locator(".turn[data-call='assist#1/turn:2']")
    second.locator("> .actions a[data-action='edit_reply']").click()
    composer = page.locator("#composer")
    expect(composer).to_contain_text("Forks right before call assist#1/turn:2")
    changes = json.loads(composer.locator("textarea[name='extra_changes']").input_value())
    assert changes[0]["kind"] == "reply" and changes[0]["call"] == "assist#1/turn:2"
    assert [c["name"] for c in changes[0]["tool_calls"]] == ["issue_refund"]
    shot(page, "conversation-2-composer")

    changes[0].pop("tool_calls")  # the agent answers instead of refunding
    changes[0]["text"] = "I cannot refund this order; a colleague will follow up."
    composer.locator("textarea[name='extra_changes']").fill(json.dumps(changes))
    page.get_by_role("button", name="Start fork").click()
    expect(page).to_have_url(re.compile(r"/compare/\w+/\w+/$"), timeout=30_000)
    calls = page.locator(".calldiff")
    expect(calls).to_contain_text("The issue_refund call (assist#1/turn:2/tool:1) is gone.")
    expect(calls).to_contain_text("The reply of assist#1/turn:2 changed.")
    expect(calls.locator("tr[data-call='assist#1/turn:1'][data-op='same']")).to_have_count(1)
    shot(page, "conversation-3-call-diff")
