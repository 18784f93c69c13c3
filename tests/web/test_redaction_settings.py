"""FORKLAB_REDACT_KEYS reaches the engine: recordings made through the app redact those keys."""

from __future__ import annotations

import pytest
from django.test import override_settings

from forklab.engine.graph import parse_graph
from forklab.runs.engine_env import build_environment
from forklab.runs.models import Event, Project
from forklab.runs.services import install_graph, record_run

pytestmark = pytest.mark.django_db


@override_settings(FORKLAB_REDACT_KEYS=["customer_ssn"])
def test_keys_named_in_settings_are_redacted_in_what_the_app_records() -> None:
    assert build_environment().redactor.secret_key("customer_ssn")
    project = Project.objects.create(slug="redact", name="Redact")
    graph = parse_graph({
        "id": "lookup-ssn", "start": "lookup",
        "nodes": [{"id": "lookup", "kind": "tool", "effect": "read",
                   "tool": "forklab.engine.scenarios.tools.fetch_page",
                   "reads": ["url", "customer_ssn"], "writes": ["page"]}]})
    install_graph(project=project, graph=graph)
    run = record_run(project=project, graph=graph,
                     input={"url": "https://example.org/x", "customer_ssn": "123-45-6789"})
    args = Event.objects.get(run_id=run.id, type="tool.called").payload["args"]
    assert args == {"url": "https://example.org/x", "customer_ssn": "[REDACTED]#1"}


def test_without_the_setting_only_the_default_names_are_secret() -> None:
    redactor = build_environment().redactor
    assert redactor.secret_key("api_key") and not redactor.secret_key("customer_ssn")
