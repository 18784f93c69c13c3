"""The OpenAI-compatible provider over real HTTP, against a local fake chat-completions server.

Invariants checked: the request body carries model, messages (system prompt first),
temperature and max_tokens; text and usage come from the response; every failure — an HTTP
error status, a malformed body, a refused connection — is a ``ProviderError``
(``provider_error``), which a run records as ``node.failed`` instead of letting a traceback
escape; an unpriced model records ``cost_usd`` None.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from forklab.engine.environment import Environment
from forklab.engine.errors import ProviderError
from forklab.engine.graph import parse_graph
from forklab.engine.providers import ChatRequest, OpenAICompatibleProvider, ProviderRegistry
from forklab.engine.recording import run_recorded


@dataclass
class FakeServer:
    """What the fake answers next (status, raw body) and every request it received."""

    base_url: str = ""
    status: int = 200
    body: bytes = b""
    requests: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, text: str, prompt_tokens: int | None = 11,
               completion_tokens: int | None = 7) -> None:
        data: dict[str, Any] = {
            "id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
        }
        if prompt_tokens is not None:
            data["usage"] = {"prompt_tokens": prompt_tokens,
                             "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + (completion_tokens or 0)}
        self.status, self.body = 200, json.dumps(data).encode()

    def ask_for_tools(self, *calls: tuple[str, str, str], content: str | None = None) -> None:
        """Answer with a message asking for tool calls ``(id, name, arguments text)``, the
        way Chat Completions does: ``content`` null, ``finish_reason`` ``tool_calls``."""
        message = {"role": "assistant", "content": content, "tool_calls": [
            {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}
            for id_, name, args in calls]}
        data = {"id": "chatcmpl-2", "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}}
        self.status, self.body = 200, json.dumps(data).encode()


def _handler(fake: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            fake.requests.append({
                "path": self.path, "headers": dict(self.headers),
                "body": json.loads(self.rfile.read(length) or b"null"),
            })
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            self.send_response(fake.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(fake.body)))
            self.end_headers()
            self.wfile.write(fake.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output quiet

    return Handler


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    state = FakeServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture
def fake(server: FakeServer) -> FakeServer:
    """The shared server, reset: no scripted answer, no requests seen."""
    server.status, server.body = 200, b""
    server.requests.clear()
    return server


def request(**overrides: Any) -> ChatRequest:
    fields: dict[str, Any] = {
        "provider": "openai", "model": "gpt-4o-mini", "system_prompt": "Be brief.",
        "temperature": 0.3, "max_tokens": 64,
        "messages": ({"role": "user", "content": "Say hi"},),
    }
    return ChatRequest(**{**fields, **overrides})


def no_wait(seconds: float) -> None:
    """The retries' sleep: tests never wait (tests/engine/providers checks the delays)."""


def provider(fake: FakeServer, **options: Any) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(base_url=fake.base_url, timeout_s=10, sleep=no_wait,
                                    **options)


# -- the wire ------------------------------------------------------------------------------


def test_request_body_carries_model_messages_temperature_and_max_tokens(fake: FakeServer) -> None:
    fake.answer("hi")
    provider(fake, api_key="sk-test").complete(request())
    [sent] = fake.requests
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["Authorization"] == "Bearer sk-test"
    assert sent["body"] == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Say hi"}],
        "temperature": 0.3,
        "max_tokens": 64,
    }


def test_an_empty_system_prompt_sends_no_system_message(fake: FakeServer) -> None:
    fake.answer("hi")
    provider(fake).complete(request(system_prompt=""))
    assert [m["role"] for m in fake.requests[0]["body"]["messages"]] == ["user"]


def test_response_text_and_usage_tokens_come_from_the_server(fake: FakeServer) -> None:
    fake.answer("Hello there.", prompt_tokens=21, completion_tokens=3)
    response = provider(fake).complete(request())
    assert (response.text, response.input_tokens, response.output_tokens) == (
        "Hello there.", 21, 3)
    assert response.latency_ms >= 0


def test_a_response_without_usage_gets_estimated_token_counts(fake: FakeServer) -> None:
    fake.answer("Twelve chars", prompt_tokens=None)
    response = provider(fake).complete(request())
    assert response.output_tokens == 3
    assert response.input_tokens > 0


# -- failures ------------------------------------------------------------------------------


def test_an_http_500_raises_provider_error_with_the_status(fake: FakeServer) -> None:
    fake.status, fake.body = 500, b'{"error": {"message": "model overloaded"}}'
    with pytest.raises(ProviderError) as info:
        provider(fake).complete(request())
    assert info.value.code == "provider_error"
    assert info.value.context["status"] == 500
    assert "500" in info.value.message and "model overloaded" in info.value.message


@pytest.mark.parametrize("body", [
    b"this is not json",
    b'{"choices": []}',
    b'{"choices": [{"message": {}}]}',
    b'{"object": "error"}',
    b"[1, 2]",
], ids=["not-json", "no-choices", "no-content", "no-choices-key", "a-list"])
def test_a_malformed_body_raises_provider_error(fake: FakeServer, body: bytes) -> None:
    fake.status, fake.body = 200, body
    with pytest.raises(ProviderError) as info:
        provider(fake).complete(request())
    assert info.value.code == "provider_error"
    assert "choices[0].message.content" in info.value.message


def test_a_reply_asking_for_tool_calls_carries_them_not_an_empty_answer(fake: FakeServer) -> None:
    fake.ask_for_tools(("call_a", "lookup_order", '{"order_id": "A-17"}'),
                       ("call_b", "refund", "not json"))
    response = provider(fake).complete(request())
    assert response.text == ""
    assert response.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_a", "lookup_order", {"order_id": "A-17"}), ("call_b", "refund", "not json")]
    assert (response.input_tokens, response.output_tokens) == (30, 12)


def test_a_refused_connection_raises_provider_error() -> None:
    with socket.socket() as sock:  # a port nothing listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = OpenAICompatibleProvider(base_url=f"http://127.0.0.1:{port}/v1", timeout_s=5,
                                    sleep=no_wait)
    with pytest.raises(ProviderError) as info:
        dead.complete(request())
    assert info.value.code == "provider_error"
    assert "cannot reach" in info.value.message
    assert "is the server running?" in info.value.message


# -- end to end ----------------------------------------------------------------------------


def graph(model: str = "gpt-4o-mini") -> Any:
    return parse_graph({
        "id": "openai-e2e", "start": "ask",
        "nodes": [{"id": "ask", "kind": "agent",
                   "agent": {"provider": "openai", "model": model, "system_prompt": "Be brief.",
                             "temperature": 0.2, "max_tokens": 32},
                   "reads": ["question"], "writes": ["answer"], "prompt": "Q: {question}"}],
    })


def env_for(fake: FakeServer) -> Environment:
    return Environment(providers=ProviderRegistry({"openai": provider(fake)}))


def test_a_run_on_the_openai_provider_records_the_servers_answer(fake: FakeServer) -> None:
    fake.answer("Paris.", prompt_tokens=1000, completion_tokens=2000)
    recorded = run_recorded(graph(), {"question": "Capital of France?"}, env=env_for(fake))
    assert recorded.state.status == "completed"
    assert recorded.memory["answer"] == "Paris."
    [responded] = [e for e in recorded.event_log if e.type == "agent.responded"]
    assert (responded.text, responded.label) == ("Paris.", "live")
    assert (responded.input_tokens, responded.output_tokens) == (1000, 2000)
    assert responded.cost_usd == pytest.approx((1000 * 0.15 + 2000 * 0.60) / 1_000_000)
    assert fake.requests[0]["body"]["messages"][1] == {"role": "user",
                                                       "content": "Q: Capital of France?"}


def test_a_failing_server_fails_the_node_instead_of_raising(fake: FakeServer) -> None:
    fake.status, fake.body = 500, b"upstream exploded"
    recorded = run_recorded(graph(), {"question": "Capital of France?"}, env=env_for(fake))
    types = [e.type for e in recorded.event_log]
    assert types[-2:] == ["node.failed", "run.failed"]
    failed = recorded.event_log[-2]
    assert failed.node == "ask"
    assert failed.error["type"] == "provider_error"
    assert "upstream exploded" in failed.error["message"]
    assert recorded.state.status == "failed"
    assert "answer" not in recorded.memory


def test_tool_calls_to_an_agent_offered_no_tools_fail_the_node_never_an_empty_answer(
        fake: FakeServer) -> None:
    fake.ask_for_tools(("call_a", "lookup_order", '{"order_id": "A-17"}'))
    recorded = run_recorded(graph(), {"question": "Where is A-17?"}, env=env_for(fake))
    assert recorded.state.status == "failed"
    assert "answer" not in recorded.memory
    assert not [e for e in recorded.event_log if e.type == "agent.responded"]
    [call_failed] = [e for e in recorded.event_log if e.type == "call.failed"]
    assert call_failed.error["type"] == "unexpected_tool_calls"
    assert "lookup_order" in call_failed.error["message"]
    assert '"A-17"' in call_failed.error["message"]


def test_an_unpriced_model_records_no_cost(fake: FakeServer) -> None:
    fake.answer("Paris.")
    recorded = run_recorded(graph(model="my-local-model"), {"question": "Capital?"},
                            env=env_for(fake))
    [responded] = [e for e in recorded.event_log if e.type == "agent.responded"]
    assert responded.cost_usd is None
    assert recorded.state.unpriced_calls == 1
    assert recorded.state.cost_usd == 0.0


def test_the_engine_imports_neither_httpx_nor_yaml_until_they_are_used() -> None:
    """A fresh process importing the engine and recording a run leaves httpx (with the CLI
    packages it pulls in) and yaml unimported: the imported heap is what a process's full
    garbage collections walk, so optional dependencies load on first use."""
    script = ("import sys; import forklab.engine as e; "
              "from forklab.engine.sqlite_store import SqliteStore; "
              "e.run_recorded(e.parse_graph({'id': 'g', 'start': 'a', 'nodes': [{'id': 'a', "
              "'kind': 'agent', 'writes': ['x'], 'agent': {'provider': 'scripted', "
              "'model': 'm', 'system_prompt': 's'}}], 'edges': []}), {}); "
              "print(sorted(m for m in ('httpx', 'yaml', 'rich', 'click') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "[]"
