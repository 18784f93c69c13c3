"""A loopback stub of both vendor APIs — OpenAI Chat Completions and Anthropic Messages —
whose replies depend on what is sent (``model.py`` says how), for tests that need a real
HTTP model without the network. It also answers the Responses API (``/v1/responses``,
``responses_api.py``) and streams any answer asked with ``"stream": true``
(``streaming.py``).

It checks each request as strictly as the real API does (``openai_api.py``,
``anthropic_api.py``: tool messages must answer a preceding tool call, Anthropic roles must
alternate, …) and answers a malformed one with 400 in the vendor's own error format. The
official ``openai`` and ``anthropic`` clients talk to it unchanged
(tests/engine/providers/test_official_clients.py proves it).

One per test module: ``from tests.vendor_stub.fixtures import server, stub`` (a
module-scoped ``server`` and a ``stub`` fixture that resets it — no faults queued, no
requests seen — for each test), or by hand::

    with VendorStub() as stub:
        ...

Base URLs: ``stub.openai_base_url`` (``http://127.0.0.1:PORT/v1``, what ``openai.OpenAI``
and forklab's ``openai`` provider take) and ``stub.anthropic_base_url``
(``http://127.0.0.1:PORT``, for ``anthropic.Anthropic`` and forklab's ``anthropic``).

Faults are queued and each consumes one request, whichever vendor it is for:
``stub.fail(429, retry_after="2")`` (an error status in the vendor's error format, with
``Retry-After`` / ``retry-after-ms`` headers), ``stub.stall(5)`` (hold the answer longer
than a client's timeout; released at ``reset``/``close`` so no test waits it out),
``stub.malformed(b"...")`` (a 200 whose body is not the API's), ``stub.canned(body)`` (a
reply given verbatim), ``stub.hang_up()`` (close the connection without an answer).
``times=`` repeats one.

What arrived: ``stub.requests`` (``Received(vendor, path, headers, body)``, header names
lower-cased), ``stub.bodies("openai")``, ``stub.last``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from tests.vendor_stub import anthropic_api, openai_api, responses_api, streaming
from tests.vendor_stub.model import reply
from tests.vendor_stub.openai_api import Invalid

ROUTES = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic",
          "/v1/responses": "openai"}


@dataclass(frozen=True)
class Received:
    vendor: str  # "openai" | "anthropic" | "unknown"
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class Fault:
    status: int = 200
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    stall_s: float = 0.0
    raw: bytes | None = None
    hang_up: bool = False


class VendorStub:
    """The stub server (see the module docstring); a context manager."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.root_url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        daemon=True)

    @property
    def openai_base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.root_url

    def __enter__(self) -> VendorStub:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def reset(self) -> None:
        """Forget queued faults and received requests; release stalled answers."""
        with self._lock:
            self._faults.clear()
            self.requests.clear()
            self._release.set()
            self._release = threading.Event()

    # -- faults ------------------------------------------------------------------------------

    def fail(self, status: int, *, message: str | None = None, retry_after: str | None = None,
             retry_after_ms: str | None = None, times: int = 1,
             headers: dict[str, str] | None = None) -> None:
        """The next ``times`` requests get ``status`` with the vendor's error body."""
        extra = dict(headers or {})
        if retry_after is not None:
            extra["Retry-After"] = retry_after
        if retry_after_ms is not None:
            extra["retry-after-ms"] = retry_after_ms
        text = message or f"stub fault: HTTP {status}"
        self._queue(Fault(status=status, message=text, headers=extra), times)

    def stall(self, seconds: float, *, times: int = 1) -> None:
        """The next ``times`` answers are held ``seconds`` (or until ``reset``/``close``)."""
        self._queue(Fault(stall_s=seconds), times)

    def malformed(self, body: bytes = b"this is not json", *, times: int = 1) -> None:
        """The next ``times`` requests get a 200 with ``body``."""
        self._queue(Fault(raw=body), times)

    def canned(self, body: Any, *, status: int = 200, times: int = 1) -> None:
        """The next ``times`` requests get ``body`` (JSON-encoded unless bytes) as it is —
        a reply the stub's model would not write (``stop_reason: max_tokens``, …)."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self._queue(Fault(status=status, raw=raw), times)

    def hang_up(self, *, times: int = 1) -> None:
        """The next ``times`` connections are closed without an answer."""
        self._queue(Fault(hang_up=True), times)

    def _queue(self, fault: Fault, times: int) -> None:
        with self._lock:
            self._faults.extend([fault] * times)

    # -- what arrived ----------------------------------------------------------------------

    def bodies(self, vendor: str | None = None) -> list[Any]:
        return [r.body for r in self.requests if vendor in (None, r.vendor)]

    @property
    def last(self) -> Received:
        return self.requests[-1]

    # -- answering ---------------------------------------------------------------------------

    def answer(self, path: str, headers: dict[str, str], raw: bytes,
               ) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body for one request (the handler writes them)."""
        vendor = ROUTES.get(path.split("?")[0], "unknown")
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self._lock:
            self.requests.append(Received(vendor, path, headers, body))
            fault = self._faults.pop(0) if self._faults else None
            release = self._release
        if vendor == "unknown":
            return 404, {}, json.dumps(openai_api.error_body(f"no route {path}")).encode()
        responses = path.split("?")[0] == "/v1/responses"
        api: Any = (responses_api if responses else openai_api if vendor == "openai"
                    else anthropic_api)
        if fault is not None and fault.stall_s:
            release.wait(fault.stall_s)
        elif fault is not None and fault.hang_up:
            return 0, {}, b""
        elif fault is not None and fault.raw is not None:
            return fault.status, {}, fault.raw
        elif fault is not None:
            kind = "rate_limit_error" if fault.status == 429 else "api_error"
            return fault.status, fault.headers, json.dumps(
                api.error_body(fault.message, kind)).encode()
        if vendor == "anthropic" and not (headers.get("x-api-key")
                                          or headers.get("authorization", "").startswith("Bearer ")):
            return 401, {}, json.dumps(anthropic_api.error_body(  # newer SDKs send a bearer
                "x-api-key header is required", "authentication_error")).encode()
        try:
            conversation = api.read(body, headers)
        except Invalid as exc:
            return 400, {}, json.dumps(api.error_body(str(exc))).encode()
        prefix = "call_" if vendor == "openai" else "toolu_"
        rendered = api.render(reply(conversation, prefix), conversation)
        if not (isinstance(body, dict) and body.get("stream")):
            return 200, {}, json.dumps(rendered).encode()
        sse = {"Content-Type": "text/event-stream"}
        if responses:
            return 200, sse, streaming.responses(rendered)
        if vendor == "openai":
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return 200, sse, streaming.openai_chat(rendered, usage)
        return 200, sse, streaming.anthropic(rendered)


def _handler(stub: VendorStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so no client holds a socket open between
        # tests (an unclosed one is a ResourceWarning — an error here — when collected)
        protocol_version = "HTTP/1.0"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, extra, body = stub.answer(self.path, headers, self.rfile.read(length))
            if status == 0:  # hang up: no status line at all
                self.close_connection = True
                return
            try:
                self.send_response(status)
                self.send_header("Content-Type",
                                 extra.pop("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(body)))
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test): nothing to answer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output quiet

    return Handler
