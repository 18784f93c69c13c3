"""Observability (SPEC §3.11): fork spans, counterfactual metrics at /metrics, structured logs."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from forklab.engine.scenarios import SCENARIOS
from forklab.runs.forking import start_fork
from forklab.runs.models import Membership, Project, Role, Run
from forklab.runs.observability import configure_tracing
from forklab.runs.services import record_run
from forklab.runs.specs import ForkSpec
from forklab.runs.task_backends import drain

pytestmark = pytest.mark.django_db(transaction=True)

_exporter = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Spans finished during the test (one SDK provider per process: the API allows one)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    _exporter.clear()
    yield _exporter
    _exporter.clear()


@pytest.fixture
def member() -> Any:
    user = get_user_model().objects.create_user("member")
    project = Project.objects.create(slug="obs", name="Observed")
    Membership.objects.create(user=user, project=project, role=Role.MEMBER)
    return user


def fork_research_write(member: Any) -> Run:
    project = Project.objects.get(slug="obs")
    scenario = SCENARIOS["research-write"]
    base = record_run(project=project, graph=scenario.graph(), input=scenario.input)
    started = start_fork(user=member, spec=ForkSpec(
        base_run=base.id, at="before:write#1",
        changes=[{"kind": "model", "target": "write", "model": "scripted-small"}]))
    assert drain(timeout=60)
    run = Run.objects.get(pk=started.run.id)
    assert run.status == "completed", run.error
    return run


def by_name(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def test_a_fork_tail_runs_under_a_replay_fork_span_with_the_run_and_nodes_nested(
        spans: InMemorySpanExporter, member: Any) -> None:
    fork = fork_research_write(member)
    finished = list(spans.get_finished_spans())
    [root] = [s for s in by_name(finished, "replay.fork")
              if s.attributes and s.attributes["fork.run_id"] == fork.id]
    attributes = dict(root.attributes or {})
    assert attributes["fork.base_run_id"] == fork.parent_run_id
    assert attributes["fork.sequence_id"] == fork.fork_sequence_id
    assert attributes["fork.node_id"] == "write"
    assert json.loads(str(attributes["fork.changes"]))[0]["kind"] == "model"
    assert "fork.base_trace_id" in attributes

    trace_spans = [s for s in finished if s.context.trace_id == root.context.trace_id]
    [workflow] = by_name(trace_spans, "workflow.run")
    assert workflow.parent is not None and workflow.parent.span_id == root.context.span_id
    nodes = by_name(trace_spans, "node.execute.")
    assert [n.name for n in nodes] == ["node.execute.agent"]  # the tail: 'write' only
    assert all(n.parent is not None and n.parent.span_id == workflow.context.span_id
               for n in nodes)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_metrics_count_a_forks_tail_as_counterfactual(member: Any) -> None:
    before = {
        "runs": sample("forklab_workflow_runs_started_total", run_kind="counterfactual"),
        "primary": sample("forklab_workflow_runs_started_total", run_kind="primary"),
        "nodes": sample("forklab_node_executions_total", run_kind="counterfactual",
                        node_kind="agent", status="completed"),
        "calls": sample("forklab_model_calls_total", run_kind="counterfactual",
                        model="scripted-small", label="changed"),
    }
    fork_research_write(member)
    assert sample("forklab_workflow_runs_started_total",
                  run_kind="counterfactual") == before["runs"] + 1
    assert sample("forklab_workflow_runs_started_total", run_kind="primary") == \
        before["primary"] + 1  # the base
    assert sample("forklab_node_executions_total", run_kind="counterfactual",
                  node_kind="agent", status="completed") == before["nodes"] + 1
    assert sample("forklab_model_calls_total", run_kind="counterfactual",
                  model="scripted-small", label="changed") == before["calls"] + 1

    response = Client().get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert 'forklab_workflow_runs_started_total{run_kind="counterfactual"}' in text
    assert 'forklab_workflow_run_duration_seconds_count{run_kind="counterfactual"}' in text


def test_metrics_may_require_a_bearer_token(settings: Any) -> None:
    settings.FORKLAB_METRICS_TOKEN = "s3cret"
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", headers={
        "Authorization": "Bearer s3cret"}).status_code == 200


def test_the_fork_started_log_line_is_structured_with_base_run_seq_and_node(
        member: Any) -> None:
    [handler] = [h for h in logging.getLogger().handlers if type(h) is logging.StreamHandler]
    out = io.StringIO()
    capture = logging.StreamHandler(out)
    capture.setFormatter(handler.formatter)  # the formatter settings.LOGGING configured
    logger = logging.getLogger("forklab.engine.fork")
    logger.addHandler(capture)
    try:
        fork = fork_research_write(member)
    finally:
        logger.removeHandler(capture)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    [line] = [x for x in lines if x["event"] == "replay.fork.fork_started"]
    assert line["base_run_id"] == fork.parent_run_id
    assert line["fork_run_id"] == fork.id
    assert line["fork_sequence_id"] == fork.fork_sequence_id
    assert line["fork_node_id"] == "write"
    assert line["logger"] == "forklab.engine.fork" and line["level"] == "info"
    assert "timestamp" in line


def test_tracing_is_not_configured_without_an_endpoint() -> None:
    assert configure_tracing("") is False
