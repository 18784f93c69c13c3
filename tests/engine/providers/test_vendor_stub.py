"""The stub refuses what the real APIs refuse, with a 400 in the vendor's error format —
so a provider test passing against it means the shape was right, not that the stub was
lenient."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.vendor_stub import VendorStub

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
USER = {"role": "user", "content": "hi"}


def post(stub: VendorStub, vendor: str, body: Any) -> httpx.Response:
    if vendor == "openai":
        return httpx.post(f"{stub.openai_base_url}/chat/completions", json=body)
    return httpx.post(f"{stub.anthropic_base_url}/v1/messages", json=body,
                      headers={"x-api-key": "k", "anthropic-version": "2023-06-01"})


@pytest.mark.parametrize(("body", "said"), [
    ({"messages": [USER]}, "model"),
    ({"model": "m", "messages": []}, "non-empty"),
    ({"model": "m", "messages": [USER, {"role": "assistant", "content": None,
                                        "tool_calls": [CALL]}, USER]}, "must be followed"),
    ({"model": "m", "messages": [USER, {"role": "tool", "tool_call_id": "c9",
                                        "content": "x"}]}, "preceeding"),
    ({"model": "m", "messages": [USER, {"role": "assistant", "content": None, "tool_calls": [
        {**CALL, "function": {"name": "f", "arguments": {}}}]}]}, "JSON string"),
    ({"model": "m", "messages": [USER], "tool_choice": "auto"}, "only allowed when"),
    ({"model": "m", "messages": [USER], "tools": TOOLS,
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "not in 'tools'"),
    ({"model": "m", "messages": [USER], "tools": [{"type": "function", "function": {
        "name": "bad name"}}]}, "does not match"),
    ({"model": "m", "messages": [USER], "temperature": 3}, "between 0 and 2"),
    ({"model": "m", "messages": [USER], "response_format": {"type": "json_schema"}},
     "response_format"),
], ids=["no-model", "no-messages", "unanswered-call", "orphan-result", "object-arguments",
        "choice-without-tools", "unknown-forced-tool", "bad-tool-name", "temperature",
        "schema-missing"])
def test_openai_shapes_the_api_refuses_are_a_400_in_its_error_format(
        stub: VendorStub, body: Any, said: str) -> None:
    response = post(stub, "openai", body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and said in error["message"]


ASSISTANT_USE = {"role": "assistant", "content": [
    {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}


@pytest.mark.parametrize(("body", "said"), [
    ({"model": "m", "messages": [USER]}, "max_tokens"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": "x"}]},
     "first message"),
    ({"model": "m", "max_tokens": 5, "messages": [USER, USER]}, "alternate"),
    ({"model": "m", "max_tokens": 5, "messages": [USER, {"role": "system", "content": "s"}]},
     "role"),
    ({"model": "m", "max_tokens": 5, "messages": [USER, ASSISTANT_USE, USER]},
     "without `tool_result`"),
    ({"model": "m", "max_tokens": 5, "messages": [USER, ASSISTANT_USE, {
        "role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2",
                                     "content": "x"}]}]}, "unexpected `tool_use_id`"),
    ({"model": "m", "max_tokens": 5, "messages": [USER, ASSISTANT_USE, {
        "role": "user", "content": [{"type": "text", "text": "a"},
                                    {"type": "tool_result", "tool_use_id": "t1",
                                     "content": "x"}]}]}, "must come first"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": ""}]},
     "non-empty"),
    ({"model": "m", "max_tokens": 5, "messages": [USER], "tool_choice": {"type": "auto"}},
     "providing tools"),
    ({"model": "m", "max_tokens": 5, "messages": [USER],
      "tools": [{"name": "f", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "tool", "name": "g"}}, "was not provided"),
    ({"model": "m", "max_tokens": 5, "messages": [USER], "temperature": 1.5},
     "less than or equal to 1"),
], ids=["no-max-tokens", "assistant-first", "two-users", "system-in-messages",
        "unanswered-use", "orphan-result", "result-not-first", "empty-content",
        "choice-without-tools", "unknown-forced-tool", "temperature"])
def test_anthropic_shapes_the_api_refuses_are_a_400_in_its_error_format(
        stub: VendorStub, body: Any, said: str) -> None:
    response = post(stub, "anthropic", body)
    assert response.status_code == 400
    data = response.json()
    assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error"
    assert said in data["error"]["message"]


def test_anthropic_without_a_key_is_a_401(stub: VendorStub) -> None:
    response = httpx.post(f"{stub.anthropic_base_url}/v1/messages",
                          json={"model": "m", "max_tokens": 5, "messages": [USER]},
                          headers={"anthropic-version": "2023-06-01"})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_a_well_formed_request_is_answered_and_recorded(stub: VendorStub, vendor: str) -> None:
    body: dict[str, Any] = {"model": "m", "max_tokens": 5, "messages": [USER]}
    response = post(stub, vendor, body)
    assert response.status_code == 200
    assert stub.bodies(vendor) == [body] and stub.last.vendor == vendor
