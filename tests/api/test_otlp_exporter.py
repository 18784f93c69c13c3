"""The real OTLP/HTTP exporter (opentelemetry-exporter-otlp-proto-http, gzip on) sending to
forklab's receiver over HTTP: what an app configured with OTEL_EXPORTER_OTLP_* does."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rest_framework.authtoken.models import Token

from forklab.runs.models import Membership, Project, Role, Run

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_sdks_otlp_exporter_delivers_a_trace_that_becomes_a_run(live_server: Any) -> None:
    user = get_user_model().objects.create_user("app")
    project = Project.objects.create(slug="apps", name="Apps")
    Membership.objects.create(user=user, project=project, role=Role.MEMBER)
    token = Token.objects.create(user=user).key
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("app")
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 3, "gen_ai.usage.output_tokens": 2}
    with (tracer.start_as_current_span("invoke_agent helper", attributes=agent),
          tracer.start_as_current_span("chat gpt-4o", attributes=chat)):
        pass
    exporter = OTLPSpanExporter(endpoint=f"{live_server.url}/v1/traces",
                                headers={"Authorization": f"Token {token}",
                                         "X-Forklab-Project": "apps"},
                                compression=Compression.Gzip, timeout=10)
    try:
        assert exporter.export(memory.get_finished_spans()) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    trace_id = format(memory.get_finished_spans()[0].context.trace_id, "032x")
    run = Run.objects.get(trace_id=trace_id)
    assert (run.project.slug, run.status, run.input_tokens) == ("apps", "completed", 3)
