"""forklab's own spans follow the GenAI conventions (SPEC §8 "Out"): a ``chat {model}``
span per model turn and an ``execute_tool {tool}`` span per tool call, under the node's
span, with usage, call key and provenance label; content only when capture is on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from forklab.engine.recording import run_recorded
from forklab.engine.reducers import fold
from forklab.engine.telemetry import CAPTURE_CONTENT
from tests.engine.agents.helpers import TICKET, FollowingModel, env_with, support_graph

_exporter = InMemorySpanExporter()
_processor = SimpleSpanProcessor(_exporter)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's one SDK provider (made here unless a test made it), exporting here."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if _processor not in provider._active_span_processor._span_processors:
        provider.add_span_processor(_processor)
    _exporter.clear()
    yield _exporter
    _exporter.clear()


def _record() -> tuple[list[ReadableSpan], list[str]]:
    recorded = run_recorded(support_graph(), dict(TICKET), env=env_with(FollowingModel()))
    keys = [c.call for c in fold(recorded.store.read(recorded.run_id)).calls if c.call]
    return [s for s in _exporter.get_finished_spans()
            if (s.attributes or {}).get("forklab.run.id") == recorded.run_id
            or s.name.startswith("node.execute.")], keys


def test_each_call_is_a_genai_span_under_its_nodes_span_with_key_and_label(
        spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_CONTENT, raising=False)
    finished, keys = _record()
    calls = [s for s in finished if s.name.startswith(("chat ", "execute_tool "))]
    assert [s.attributes["forklab.call.key"] for s in calls] == keys  # type: ignore[index]
    assert {s.attributes["forklab.call.label"] for s in calls} == {"live"}  # type: ignore[index]
    nodes = {s.context.span_id: s for s in finished if s.name == "node.execute.agent"}
    assert all(s.parent is not None and s.parent.span_id in nodes for s in calls)
    chat = next(s for s in calls if s.name == "chat scripted-small")
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert int(str(attributes["gen_ai.usage.input_tokens"])) > 0
    assert "gen_ai.input.messages" not in attributes  # capture is off
    tool = next(s for s in calls if s.name.startswith("execute_tool "))
    assert tool.attributes["gen_ai.tool.name"] == "lookup_order"  # type: ignore[index]
    assert "gen_ai.tool.call.arguments" not in (tool.attributes or {})


def test_with_capture_on_the_spans_carry_the_messages(
        spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT, "true")
    finished, _ = _record()
    chat = next(s for s in finished if s.name.startswith("chat "))
    assert "A-1001" in str((chat.attributes or {})["gen_ai.input.messages"])
    assert "gen_ai.output.messages" in (chat.attributes or {})
    tool = next(s for s in finished if s.name.startswith("execute_tool "))
    assert "A-1001" in str((tool.attributes or {})["gen_ai.tool.call.arguments"])
