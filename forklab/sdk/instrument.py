"""Recording the official vendor clients: every model call becomes an engine call (SPEC §7).

The seam is the client's HTTP ``send``: the one method every request an ``openai`` or
``anthropic`` client makes leaves through, whatever resource method, helper, streaming mode
or HTTP library (``httpx``, ``httpx2``) the client version uses. :func:`instrument` patches
the client classes' constructors to wrap the ``send`` of the HTTP client each instance holds.
Outside a workflow the wrapper passes every request through untouched. Inside one, a model
request (``POST …/chat/completions``, ``…/responses``, ``…/messages``) is read into the
provider-neutral :class:`~forklab.engine.providers.ChatRequest` and asked of the run's
oracle through :meth:`~forklab.engine.workflow_node.WorkflowScope.model_call`:

- answered live, the ORIGINAL request (with any per-call model, temperature or system prompt
  change applied) goes to the ORIGINAL endpoint through the client's own ``send`` — its
  credentials, transport and proxies — and the client gets the vendor's response as it came;
- answered from the log or by a change, the client gets a vendor-shaped response written
  from the recorded reply (text, tool calls, usage, finish reason), streamed when it asked
  for a stream, which it parses as it would the vendor's;
- failed with the vendor's error status after forklab's retries (or such a recorded failure
  served by a fork), the call is recorded as failed and the client gets the vendor's error
  answer (as it came, or the recorded body) marked ``x-should-retry: false``: it raises the
  vendor's own exception (``openai.RateLimitError`` …) at once, which the code may catch.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from forklab.engine.errors import ProviderError, ProviderTimeout
from forklab.engine.providers import Attempt, ChatRequest, ChatResponse, RetryPolicy
from forklab.engine.providers.http import retry_delay, server_delay_s, should_retry, vendor_message
from forklab.engine.workflow_node import REFUSED_HEADER, VendorRefused, current_scope
from forklab.sdk import wire_anthropic, wire_openai, wire_responses

_ENDPOINTS: dict[str, tuple[tuple[str, ModuleType], ...]] = {
    "openai": (("/chat/completions", wire_openai), ("/responses", wire_responses)),
    "anthropic": (("/messages", wire_anthropic),),
}
_DROPPED_HEADERS = {"content-encoding", "content-length", "transfer-encoding"}
_lock = threading.Lock()
_patched: set[str] = set()


def _wire(vendor: str, request: Any) -> ModuleType | None:
    if request.method != "POST":
        return None
    path = request.url.path.rstrip("/")
    return next((wire for suffix, wire in _ENDPOINTS[vendor] if path.endswith(suffix)), None)


def _response(request: Any, status: int, headers: dict[str, str], content: bytes) -> Any:
    """A response of the request's own HTTP library (``httpx`` or ``httpx2``)."""
    library = sys.modules[type(request).__module__.partition(".")[0]]
    return library.Response(status, headers=headers, content=content, request=request)


def _resend(request: Any, body: dict[str, Any]) -> Any:
    headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
    return type(request)(request.method, request.url, headers=headers,
                         content=json.dumps(body).encode())


@dataclass
class Raw:
    status: int
    headers: dict[str, str]
    content: bytes


class Passthrough:
    """The provider a workflow's model call is answered live by: the user's own client.

    Lent for one call (``engine.providers.lend_providers``) under the call's provider name;
    ``raw`` keeps the vendor's response when it was used, so the client gets it unchanged.
    Failed attempts are retried as the engine's providers retry (``providers.http``: 408,
    409, 429, 5xx and no answer; ``Retry-After`` honoured), at most the client's own
    ``max_retries`` times, each attempt recorded on the call; a final failure is the
    call's ``provider_error`` (``provider_timeout``), carrying the vendor's status, message
    and (JSON, up to 4 KB) body, and ``failed`` keeps the vendor's last error answer for the
    client. (The client's own retry loop never sees these attempts: it would make each a
    new call.)"""

    def __init__(self, name: str, wire: ModuleType, body: dict[str, Any], was: ChatRequest,
                 request: Any, send: Callable[[Any], Any], max_retries: int) -> None:
        self.name = name
        self.wire, self.body, self.was, self.request, self.send = wire, body, was, request, send
        self.max_retries = max_retries
        self.raw: Raw | None = None
        self.failed: Raw | None = None  # the vendor's last error answer, as it came
        self.sleep: Callable[[float], None] = time.sleep

    def complete(self, request: ChatRequest) -> ChatResponse:
        body = self.wire.apply(self.body, self.was, request)
        attempts: list[Attempt] = []
        for n in itertools.count():
            started = time.perf_counter()
            status, headers, error, timed_out = self._attempt(body)
            latency = (time.perf_counter() - started) * 1000
            if error is None:
                attempts.append(Attempt(status=status, error=None, latency_ms=latency))
                return self._parsed(attempts)
            retry = n < self.max_retries and should_retry(status, headers)
            delay = retry_delay(n, RetryPolicy(), server_delay=server_delay_s(headers),
                                random=random.random) if retry else None
            attempts.append(Attempt(status=status, error=error, latency_ms=latency,
                                    retry_after_s=delay))
            if delay is None:
                raise self._failure(status, error, timed_out, attempts)
            self.sleep(delay)
        raise AssertionError("unreachable")

    def _attempt(self, body: dict[str, Any]) -> tuple[int | None, dict[str, str], str | None,
                                                      bool]:
        """(status, headers, error text or None, timed out) of one attempt."""
        try:
            response = self.send(_resend(self.request, body))
        except Exception as exc:  # no answer: the client's transport raised
            return None, {}, f"{type(exc).__name__}: {exc}", "Timeout" in type(exc).__name__
        headers = {k.lower(): v for k, v in response.headers.items()}
        content = bytes(response.content)
        if response.status_code >= 400:
            self.failed = Raw(response.status_code, {k: v for k, v in headers.items()
                                                     if k not in _DROPPED_HEADERS}, content)
            text = content[:1000].decode("utf-8", "replace")
            return response.status_code, headers, vendor_message(text) or text, False
        self.raw = Raw(response.status_code, {k: v for k, v in headers.items()
                                              if k not in _DROPPED_HEADERS}, content)
        return response.status_code, headers, None, False

    def _parsed(self, attempts: list[Attempt]) -> ChatResponse:
        assert self.raw is not None
        try:
            parsed: ChatResponse = self.wire.response(self.raw.content,
                                                      bool(self.body.get("stream")))
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            raise ProviderError(f"{self.name} answered a body forklab cannot read: {exc}",
                                url=str(self.request.url), status=self.raw.status) from None
        return ChatResponse(text=parsed.text, input_tokens=parsed.input_tokens,
                            output_tokens=parsed.output_tokens,
                            latency_ms=sum(a.latency_ms for a in attempts),
                            tool_calls=parsed.tool_calls, finish_reason=parsed.finish_reason,
                            attempts=tuple(attempts))

    def _failure(self, status: int | None, error: str, timed_out: bool,
                 attempts: list[Attempt]) -> ProviderError | ProviderTimeout:
        url = str(self.request.url)
        wire = [a.to_wire() for a in attempts]
        tries = f"{len(attempts)} attempt{'s' if len(attempts) > 1 else ''}"
        if timed_out:
            return ProviderTimeout(f"{self.name} at {url} did not answer in time ({tries}; "
                                   "the limit is the client's own timeout)", url=url,
                                   timeout_s=None, attempts=wire)
        what = f"HTTP {status}" if status is not None else "no answer"
        return ProviderError(f"{self.name} at {url} answered {what} ({tries}): {error}",
                             url=url, status=status, provider_message=error, attempts=wire,
                             vendor_body=self._failed_body())

    def _failed_body(self) -> Any:
        """The vendor's error body when it is JSON of at most 4 KB (what a fork serving
        this failure hands the client again), else None."""
        if self.failed is None or len(self.failed.content) > 4096:
            return None
        try:
            return json.loads(self.failed.content)
        except ValueError:
            return None


def _answer(vendor: str, wire: ModuleType, request: Any, send: Callable[[Any], Any],
            max_retries: int, key: str | None = None) -> Any:
    """Ask the run's oracle for ``request``; the response the client is handed."""
    scope = current_scope()
    assert scope is not None
    try:
        body = json.loads(request.content)
        was: ChatRequest = wire.request(body)
    except Exception as exc:  # a body this version cannot read: never sent unrecorded
        raise scope.fail("unreadable_call", (
            f"forklab cannot read this {vendor} request to {request.url.path} "
            f"({type(exc).__name__}: {exc}); it was not sent. Report it with the client's "
            "version, or make this call outside the workflow")) from None
    lent = Passthrough(was.provider, wire, body, was, request, send, max_retries)
    try:
        served = scope.model_call(vendor, was, lent, key)
    except VendorRefused as refused:
        return _refusal(request, wire, lent, refused.error, scope.refused(refused))
    if lent.raw is not None:
        return _response(request, lent.raw.status, lent.raw.headers, lent.raw.content)
    ident = hashlib.sha256(f"{was.request_hash}".encode()).hexdigest()[:24]
    content, kind = wire.render(body, served, ident)
    return _response(request, 200, {"content-type": kind}, content)


def _refusal(request: Any, wire: ModuleType, lent: Passthrough, error: dict[str, Any],
             key: str) -> Any:
    """The error answer the client is handed for a failed call: the vendor's own when this
    call got one, else (a fork serving a recorded failure) the recorded body, or one
    written from the recorded status and message. ``x-should-retry: false`` tells the
    client not to retry: forklab already did, and a retry would be a new call."""
    if lent.failed is not None:
        status, headers, content = lent.failed.status, dict(lent.failed.headers), \
            lent.failed.content
    else:
        status = int(error["status"])
        recorded = error.get("vendor_body")
        message = str(error.get("provider_message") or error.get("message") or "")
        headers = {"content-type": "application/json"}
        content = json.dumps(recorded if recorded is not None
                             else wire.error_body(status, message)).encode()
    headers.update({"x-should-retry": "false", REFUSED_HEADER: key})
    return _response(request, status, headers, content)


def _retries(client: Any) -> int:
    retries = getattr(client, "max_retries", 2)
    return retries if isinstance(retries, int) and retries >= 0 else 2


def _wrap_sync(vendor: str, http: Any, client: Any) -> None:
    original = http.send

    def send(request: Any, **kwargs: Any) -> Any:
        wire = _wire(vendor, request)
        if wire is None or current_scope() is None:
            return original(request, **kwargs)

        def live(outgoing: Any) -> Any:
            response = original(outgoing, **kwargs)
            response.read()
            return response

        return _answer(vendor, wire, request, live, _retries(client))

    http.send = send


def _wrap_async(vendor: str, http: Any, client: Any) -> None:
    original: Callable[..., Awaitable[Any]] = http.send

    async def send(request: Any, **kwargs: Any) -> Any:
        wire = _wire(vendor, request)
        if wire is None or current_scope() is None:
            return await original(request, **kwargs)
        loop = asyncio.get_running_loop()

        async def fetch(outgoing: Any) -> Any:
            response = await original(outgoing, **kwargs)
            await response.aread()
            return response

        def live(outgoing: Any) -> Any:  # on the worker thread below, while the loop waits
            return asyncio.run_coroutine_threadsafe(fetch(outgoing), loop).result()

        # the oracle (store, provider) is synchronous: asked off the loop, which stays free
        # to run the live request; to_thread copies the context (the workflow scope)
        scope = current_scope()
        assert scope is not None
        key = scope.model_key(vendor)  # on the loop: concurrent calls keyed in task order
        return await asyncio.to_thread(_answer, vendor, wire, request, live, _retries(client),
                                       key)

    http.send = send


def _patch(cls: type, vendor: str, wrap: Callable[[str, Any, Any], None]) -> None:
    init = getattr(cls, "__init__")  # noqa: B009 - read off the class, not an instance

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        http = getattr(self, "_client", None)
        if http is not None and not getattr(http, "_forklab_recorded", False):
            wrap(vendor, http, self)
            http._forklab_recorded = True

    __init__.__wrapped__ = init  # type: ignore[attr-defined]
    setattr(cls, "__init__", __init__)  # noqa: B010


def instrument() -> None:
    """Record the official ``openai`` and ``anthropic`` clients made from now on (each
    vendor once it is importable; calling again is harmless), and key calls made inside a
    LangGraph node under it (:mod:`forklab.sdk.frameworks`). Outside a workflow the clients
    behave exactly as before."""
    from forklab.sdk import frameworks

    frameworks.install()
    with _lock:
        for vendor, sync_name, async_name in (("openai", "OpenAI", "AsyncOpenAI"),
                                              ("anthropic", "Anthropic", "AsyncAnthropic")):
            if vendor in _patched:
                continue
            try:
                module = __import__(vendor)
            except ImportError:
                continue
            _patch(getattr(module, sync_name), vendor, _wrap_sync)
            _patch(getattr(module, async_name), vendor, _wrap_async)
            _patched.add(vendor)


__all__ = ["Passthrough", "instrument"]
