"""A workflow node's call keys parse, round-trip, and keep the graph keys' meaning."""

from __future__ import annotations

import pytest

from forklab.engine.calls import CallAddress, parse_call_key, workflow_call


@pytest.mark.parametrize("text, call", [
    ("support#1/openai:3", "openai:3"),
    ("support/anthropic:2", "anthropic:2"),
    ("support#2/tool:issue_refund#1", "tool:issue_refund#1"),
    ("support/triage/openai:1", "triage/openai:1"),
    ("support/tool:refund#1/openai:1", "tool:refund#1/openai:1"),
])
def test_workflow_call_keys_parse_and_round_trip(text: str, call: str) -> None:
    found = parse_call_key(text)
    assert found is not None and found.node == "support" and found.call == call
    assert parse_call_key(str(found)) == found


def test_the_spec_shorthand_names_the_first_execution_of_the_workflow_node() -> None:
    assert parse_call_key("support/openai:3") == CallAddress("support", 1, "openai:3")


def test_a_vendor_call_is_a_model_call_and_a_tool_call_is_not() -> None:
    assert parse_call_key("support/openai:3").is_turn  # type: ignore[union-attr]
    assert not parse_call_key("support/tool:refund#1").is_turn  # type: ignore[union-attr]


def test_graph_keys_keep_their_meaning() -> None:
    assert parse_call_key("assist#1/turn:2/tool:1") == CallAddress("assist", 1, "turn:2/tool:1")
    alias = parse_call_key("assist/tool:call_abc")
    assert alias is not None and alias.tool_id == "call_abc" and alias.call == ""
    assert parse_call_key("assist/judge") is None  # names no call
    assert parse_call_key("support/openai:x") is None


def test_workflow_call_prefixes_the_steps() -> None:
    assert workflow_call((), "openai:1") == "openai:1"
    assert workflow_call(("plan", "search"), "tool:lookup#2") == "plan/search/tool:lookup#2"
