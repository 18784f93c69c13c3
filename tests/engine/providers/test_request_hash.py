"""The request hash recordings are matched on: unchanged for a request without the tool
fields (old logs keep their meaning), and covering each tool field once it is set."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from forklab.engine.providers import ChatRequest, ScriptedProvider, ToolDefinition

# Computed with ChatRequest as it was before tools existed (commit f084435 on main).
PINNED = [
    ({"provider": "openai", "model": "gpt-4o-mini", "system_prompt": "Be brief.",
      "temperature": 0.3, "max_tokens": 64, "params": {"top_p": 0.9},
      "messages": ({"role": "user", "content": "Say hi"},)},
     "463715f6656a6666b22a03f1b2019e02"),
    ({"provider": "scripted", "model": "scripted-small", "system_prompt": "Be brief.",
      "temperature": 0.2, "messages": ({"role": "user", "content": "Explain tides."},)},
     "73f9ac7c5e3775808089bd58bc0a104e"),
]
TOOL = ToolDefinition(name="lookup_order", parameters={
    "type": "object", "properties": {"order_id": {"type": "string"}}})


@pytest.mark.parametrize(("fields", "pinned"), PINNED)
def test_a_request_without_tool_fields_hashes_as_before_they_existed(
        fields: dict[str, Any], pinned: str) -> None:
    assert ChatRequest(**fields).request_hash == pinned
    explicit_defaults = ChatRequest(**fields, tools=(), tool_choice=None,
                                    parallel_tool_calls=None, response_format=None)
    assert explicit_defaults.request_hash == pinned


def test_the_scripted_answer_to_an_old_request_is_unchanged() -> None:
    reply = ScriptedProvider().complete(ChatRequest(**PINNED[1][0]))
    assert (reply.text, reply.input_tokens, reply.output_tokens) == (
        "Tides drive the overall result over a few weeks.", 14, 12)
    assert reply.tool_calls == ()


@pytest.mark.parametrize("change", [
    {"tools": (TOOL,)},
    {"tools": (dataclasses.replace(TOOL, description="Find an order."),)},
    {"tool_choice": "auto"},
    {"tool_choice": "none"},
    {"tool_choice": {"name": "lookup_order"}},
    {"parallel_tool_calls": True},
    {"parallel_tool_calls": False},
    {"response_format": {"type": "object"}},
], ids=repr)
def test_each_tool_field_once_set_changes_the_hash(change: dict[str, Any]) -> None:
    base = ChatRequest(**PINNED[1][0])
    changed = dataclasses.replace(base, **change)
    assert changed.request_hash != base.request_hash


def test_the_hash_tells_tool_definitions_and_their_order_apart() -> None:
    other = ToolDefinition(name="refund")
    base = ChatRequest(**PINNED[1][0])
    hashes = {dataclasses.replace(base, tools=tools).request_hash
              for tools in [(TOOL,), (other,), (TOOL, other), (other, TOOL)]}
    assert len(hashes) == 4


def test_latency_stays_outside_the_hash() -> None:
    base = ChatRequest(**PINNED[1][0], tools=(TOOL,))
    assert dataclasses.replace(base, latency_ms=90).request_hash == base.request_hash
