"""Retries and failures, decided in one place (``forklab.engine.providers.http``): the
delay computation on its own, then both vendor providers against the stub's faults. The
retries' ``sleep`` is injected: no test waits, and the delays asked for are asserted."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forklab.engine.errors import ProviderError, ProviderTimeout
from forklab.engine.providers import AnthropicProvider, OpenAICompatibleProvider, Provider
from forklab.engine.providers.http import (
    RetryPolicy,
    retry_delay,
    server_delay_s,
    should_retry,
    vendor_message,
)
from tests.engine.providers.conftest import Sleeps
from tests.engine.providers.conversation import request
from tests.vendor_stub import VendorStub

VENDORS = ["openai", "anthropic"]
POLICY = RetryPolicy()


def provider(stub: VendorStub, vendor: str, sleeps: Sleeps, **options: Any) -> Provider:
    options = {"timeout_s": 5, "sleep": sleeps, "random": lambda: 0.5, **options}
    if vendor == "openai":
        return OpenAICompatibleProvider(base_url=stub.openai_base_url, **options)
    return AnthropicProvider(base_url=stub.anthropic_base_url, api_key="ak", **options)


def url(stub: VendorStub, vendor: str) -> str:
    return (f"{stub.openai_base_url}/chat/completions" if vendor == "openai"
            else f"{stub.anthropic_base_url}/v1/messages")


# -- the policy --------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [None, 408, 409, 429, 500, 502, 503, 529])
def test_lost_connections_and_transient_statuses_are_retried(status: int | None) -> None:
    assert should_retry(status)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_statuses_that_will_not_change_are_not_retried(status: int) -> None:
    assert not should_retry(status)


def test_a_servers_x_should_retry_header_overrides_the_status() -> None:
    assert not should_retry(500, {"x-should-retry": "false"})
    assert should_retry(400, {"x-should-retry": "true"})


def test_the_backoff_ceiling_doubles_up_to_the_maximum() -> None:
    delays = [retry_delay(n, POLICY, server_delay=None, random=lambda: 0.999999)
              for n in range(7)]
    assert delays == sorted(delays)
    assert delays[1] == pytest.approx(2 * delays[0])
    assert delays[0] == pytest.approx(POLICY.initial_delay_s, rel=1e-5)
    assert delays[-1] == pytest.approx(POLICY.max_delay_s, rel=1e-5)


@given(retries=st.integers(0, 200), draw=st.floats(0, 1, exclude_max=True))
def test_full_jitter_stays_between_zero_and_the_ceiling(retries: int, draw: float) -> None:
    delay = retry_delay(retries, POLICY, server_delay=None, random=lambda: draw)
    ceiling = min(POLICY.initial_delay_s * 2 ** retries, POLICY.max_delay_s)
    assert 0 <= delay <= ceiling


def test_the_servers_delay_wins_over_backoff_and_is_capped() -> None:
    assert retry_delay(0, POLICY, server_delay=7.0, random=lambda: 0.1) == 7.0
    assert retry_delay(0, POLICY, server_delay=3600.0, random=lambda: 0.1) == (
        POLICY.max_retry_after_s)


@pytest.mark.parametrize(("headers", "seconds"), [
    ({"retry-after": "3"}, 3.0),
    ({"retry-after": "1.5"}, 1.5),
    ({"retry-after-ms": "250"}, 0.25),
    ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
    ({"retry-after": "-4"}, 0.0),
    ({"retry-after": "soon"}, None),
    ({}, None),
])
def test_the_servers_delay_is_read_from_retry_after_headers(
        headers: dict[str, str], seconds: float | None) -> None:
    assert server_delay_s(headers) == seconds


def test_a_retry_after_date_is_the_time_until_then() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    later = format_datetime(datetime(2026, 1, 2, 3, 4, 35, tzinfo=UTC), usegmt=True)
    assert server_delay_s({"retry-after": later}, now=lambda: now) == 30.0
    assert server_delay_s({"retry-after": later}, now=lambda: now + 100) == 0.0


@pytest.mark.parametrize(("body", "said"), [
    ('{"error": {"message": "bad key", "type": "invalid_request_error"}}', "bad key"),
    ('{"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}',
     "overloaded_error: busy"),
    ('{"error": "plain"}', "plain"),
    ("<html>502</html>", None),
    ('{"detail": 1}', None),
])
def test_the_vendors_own_error_message_is_read_from_either_format(
        body: str, said: str | None) -> None:
    assert vendor_message(body) == said


# -- the providers under faults ----------------------------------------------------------------


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_429_with_retry_after_waits_what_the_server_said_then_succeeds(
        stub: VendorStub, vendor: str, sleeps: Sleeps) -> None:
    stub.fail(429, retry_after="2")
    stub.fail(503, retry_after_ms="1500")
    reply = provider(stub, vendor, sleeps).complete(request(vendor))
    assert sleeps.delays == [2.0, 1.5]
    assert [(a.status, a.retry_after_s) for a in reply.attempts] == [
        (429, 2.0), (503, 1.5), (200, None)]
    assert reply.attempts[0].error is not None and "429" in reply.attempts[0].error
    assert reply.attempts[-1].error is None
    assert len(stub.requests) == 3


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("status", [408, 409, 500, 502])
def test_transient_statuses_are_retried_with_jittered_backoff(
        stub: VendorStub, vendor: str, status: int, sleeps: Sleeps) -> None:
    stub.fail(status, times=2)
    reply = provider(stub, vendor, sleeps).complete(request(vendor))
    assert sleeps.delays == [0.25, 0.5]  # random() = 0.5 of the 0.5 s and 1 s ceilings
    assert [a.status for a in reply.attempts] == [status, status, 200]


@pytest.mark.parametrize("vendor", VENDORS)
def test_exhausted_retries_fail_with_the_status_the_message_and_every_attempt(
        stub: VendorStub, vendor: str, sleeps: Sleeps) -> None:
    stub.fail(500, message="model overloaded", times=4)
    with pytest.raises(ProviderError) as info:
        provider(stub, vendor, sleeps).complete(request(vendor))
    error = info.value
    assert error.code == "provider_error"
    assert error.context["status"] == 500 and error.context["url"] == url(stub, vendor)
    assert error.context["provider_message"].endswith("model overloaded")
    assert "HTTP 500" in error.message and "model overloaded" in error.message
    assert "is the server running?" not in error.message
    assert [a["status"] for a in error.context["attempts"]] == [500] * 4
    assert len(sleeps.delays) == 3 and len(stub.requests) == 4


@pytest.mark.parametrize("vendor", VENDORS)
def test_max_retries_bounds_the_attempts(stub: VendorStub, vendor: str,
                                         sleeps: Sleeps) -> None:
    stub.fail(503, times=5)
    with pytest.raises(ProviderError) as info:
        provider(stub, vendor, sleeps, max_retries=1).complete(request(vendor))
    assert len(info.value.context["attempts"]) == 2 and len(stub.requests) == 2


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_client_error_fails_at_once_with_the_vendors_message(
        stub: VendorStub, vendor: str, status: int, sleeps: Sleeps) -> None:
    stub.fail(status, message="your key was revoked")
    with pytest.raises(ProviderError) as info:
        provider(stub, vendor, sleeps).complete(request(vendor))
    assert info.value.context["status"] == status
    assert "your key was revoked" in info.value.message
    assert sleeps.delays == [] and len(stub.requests) == 1


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_timeout_fails_with_provider_timeout_naming_the_url_and_the_limit(
        stub: VendorStub, vendor: str, sleeps: Sleeps) -> None:
    stub.stall(30, times=2)
    with pytest.raises(ProviderTimeout) as info:
        provider(stub, vendor, sleeps, timeout_s=0.2, max_retries=1).complete(request(vendor))
    error = info.value
    assert error.code == "provider_timeout"
    assert url(stub, vendor) in error.message and "0.2 s" in error.message
    assert "is the server running?" not in error.message
    assert [a["status"] for a in error.context["attempts"]] == [None, None]
    assert len(sleeps.delays) == 1


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_timeout_then_an_answer_succeeds(stub: VendorStub, vendor: str,
                                           sleeps: Sleeps) -> None:
    stub.stall(30)
    reply = provider(stub, vendor, sleeps, timeout_s=0.2).complete(request(vendor))
    assert [a.status for a in reply.attempts] == [None, 200]
    assert reply.attempts[0].error == "timed out after 0.2 s"


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_dropped_connection_is_retried_and_never_asks_if_the_server_runs(
        stub: VendorStub, vendor: str, sleeps: Sleeps) -> None:
    stub.hang_up(times=4)
    with pytest.raises(ProviderError) as info:
        provider(stub, vendor, sleeps).complete(request(vendor))
    assert info.value.context["status"] is None
    assert "cannot reach" in info.value.message
    assert "is the server running?" not in info.value.message
    assert len(stub.requests) == 4


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_refused_connection_asks_whether_the_server_is_running(
        vendor: str, sleeps: Sleeps) -> None:
    with socket.socket() as sock:  # a port nothing listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model: Provider = (
        OpenAICompatibleProvider(base_url=f"http://127.0.0.1:{port}/v1", sleep=sleeps)
        if vendor == "openai" else
        AnthropicProvider(base_url=f"http://127.0.0.1:{port}", api_key="k", sleep=sleeps))
    with pytest.raises(ProviderError) as info:
        model.complete(request(vendor))
    assert info.value.message.endswith("is the server running?")
    assert f"127.0.0.1:{port}" in info.value.message
    assert len(info.value.context["attempts"]) == 4 and len(sleeps.delays) == 3


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"choices": [], "content": 3}'],
                         ids=["not-json", "a-list", "wrong-fields"])
def test_a_malformed_reply_is_a_provider_error_and_not_retried(
        stub: VendorStub, vendor: str, body: bytes, sleeps: Sleeps) -> None:
    stub.malformed(body)
    with pytest.raises(ProviderError) as info:
        provider(stub, vendor, sleeps).complete(request(vendor))
    assert "returned a body without" in info.value.message
    assert info.value.context["status"] == 200
    assert len(stub.requests) == 1
