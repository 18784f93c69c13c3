"""The OpenAPI schema is generated, valid and complete; the docs page works offline."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client

from forklab.engine.fork.changes import KINDS

SPEC_PATHS = {
    "/api/v1/graphs/": {"get", "post"}, "/api/v1/graphs/{key}/": {"get"},
    "/api/v1/runs/": {"get", "post"}, "/api/v1/runs/{run_id}/": {"get", "delete"},
    "/api/v1/runs/{run_id}/events/": {"get"}, "/api/v1/runs/{run_id}/fork-points/": {"get"},
    "/api/v1/runs/{run_id}/forks/": {"get"}, "/api/v1/runs/{run_id}/answer/": {"post"},
    "/api/v1/forks/preflight/": {"post"}, "/api/v1/forks/": {"post"},
    "/api/v1/forks/{run_id}/": {"get"}, "/api/v1/forks/{run_id}/cancel/": {"post"},
    "/api/v1/forks/{run_id}/answer/": {"post"}, "/api/v1/forks/{run_id}/promote/": {"post"},
    "/api/v1/forks/{run_id}/save-case/": {"post"},
    "/api/v1/sweeps/estimate/": {"post"}, "/api/v1/sweeps/": {"post"},
    "/api/v1/sweeps/{group_id}/": {"get"}, "/api/v1/diff/": {"get"},
    "/api/v1/cases/": {"get"}, "/api/v1/cases/run/": {"post"},
    "/api/v1/runs/{run_id}/conversation/": {"get"},
    "/api/v1/imports/": {"post"}, "/api/v1/runs/{run_id}/otlp/": {"get"},  # SPEC §8
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What ``manage.py spectacular --validate --fail-on-warn`` writes, generated once for
    the module (each generation costs seconds; the schema is a pure function of the code)."""
    out = tmp_path_factory.mktemp("schema") / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    return dict(yaml.safe_load(out.read_text()))


def test_the_schema_validates_without_warnings(generated: dict[str, Any]) -> None:
    schema = generated
    assert schema["openapi"] == "3.1.0"
    assert {path: set(ops) - {"parameters"} for path, ops in schema["paths"].items()} == (
        SPEC_PATHS)


def test_every_operation_documents_its_errors_with_the_error_shape(
    generated: dict[str, Any],
) -> None:
    schema = generated
    assert set(schema["components"]["schemas"]["Error"]["required"]) == {"code", "detail"}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "401" in responses, (method, path)
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref == "#/components/schemas/Error", (method, path, status)


def test_optional_query_parameters_say_a_blank_value_is_allowed(
    generated: dict[str, Any],
) -> None:
    """``Query`` reads ``?after=`` as "not given"; the schema must not claim it a 400."""
    params = [p for ops in generated["paths"].values() for op in ops.values()
              if isinstance(op, dict) for p in op.get("parameters", []) if p["in"] == "query"]
    assert {p["name"] for p in params if p.get("allowEmptyValue")} >= {"after", "limit", "type"}
    required = [p for p in params if p.get("required")]
    assert required and not any(p.get("allowEmptyValue") for p in required)  # /diff/'s pair


def test_request_bodies_are_documented_from_the_specs(generated: dict[str, Any]) -> None:
    schema = generated
    body = schema["paths"]["/api/v1/forks/"]["post"]["requestBody"]["content"]
    assert body["application/json"]["schema"] == {"$ref": "#/components/schemas/ForkSpec"}
    fork_spec = schema["components"]["schemas"]["ForkSpec"]
    assert fork_spec["required"] == ["base_run"]
    assert {"at", "changes", "policy", "budget", "label", "client_request_id"} <= set(
        fork_spec["properties"])


@pytest.mark.django_db
def test_the_schema_is_served_at_api_schema() -> None:
    response = Client().get("/api/schema/", headers={"Accept": "application/json"})
    assert response.status_code == 200
    assert "/api/v1/forks/" in response.json()["paths"]


@pytest.mark.django_db
def test_the_docs_page_renders_with_bundled_assets() -> None:
    response = Client().get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    # the plain name, or its content-hashed copy once collectstatic has run
    assert re.search(r"/static/drf_spectacular_sidecar/swagger-ui-dist/"
                     r"swagger-ui-bundle(\.[0-9a-f]{12})?\.js", page)
    assert "/api/schema/" in page
    assert "cdn." not in page  # nothing to fetch from the internet
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")


@pytest.mark.parametrize("name", ["ForkSpec", "SweepSpec", "Policy", "Budget"])
def test_request_bodies_are_documented_from_the_models_the_views_validate_with(
    generated: dict[str, Any], name: str,
) -> None:
    """One definition: the component is the engine's wire model, field for field (there is
    no separate documented copy of a body that could drift from what is validated)."""
    from forklab.engine.fork import wire

    component = generated["components"]["schemas"][name]
    model = getattr(wire, name)
    assert set(component["properties"]) == {f.alias or n for n, f in model.model_fields.items()}


def test_a_graph_registration_documents_its_spec_as_the_engines_graph_spec(
    generated: dict[str, Any],
) -> None:
    schemas = generated["components"]["schemas"]
    spec = schemas["GraphRegistration"]["properties"]["spec"]
    assert spec["$ref"] == "#/components/schemas/GraphSpec"
    assert {"id", "start", "nodes", "edges"} <= set(schemas["GraphSpec"]["properties"])


def test_fork_points_and_changes_are_spelled_out(generated: dict[str, Any]) -> None:
    fork_spec = generated["components"]["schemas"]["ForkSpec"]
    points = fork_spec["properties"]["at"]["anyOf"]
    assert {next(iter(p["required"])) for p in points if p.get("type") == "object"} == {
        "sequence", "before_node", "after_node", "before_iteration", "before_human_input",
        "before_first_write_of", "before_first_read_of", "version"}
    kinds = [c["properties"]["kind"]["const"]
             for c in fork_spec["properties"]["changes"]["items"]["oneOf"]]
    assert {"model", "prompt", "temperature", "memory", "config", "route", "output", "tool",
            "human_response", "input_patch"} <= set(kinds)  # SPEC §3.3
    assert sorted(kinds) == sorted(KINDS)  # and every kind of the engine's union


@pytest.mark.django_db
def test_the_redoc_page_renders_with_bundled_assets() -> None:
    response = Client().get("/api/redoc/")
    assert response.status_code == 200
    assert re.search(r"/static/drf_spectacular_sidecar/redoc/bundles/"
                     r"redoc\.standalone(\.[0-9a-f]{12})?\.js", response.content.decode())
    assert finders.find("drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js")


def test_a_cases_criteria_are_documented_as_the_engines_condition(
    generated: dict[str, Any],
) -> None:
    """The save-case body and the Case it answers both spell a criterion as the engine's
    ``Condition`` (its operators listed), not as a free-form object."""
    schemas = generated["components"]["schemas"]
    body = schemas["CaseSpec"]["properties"]["criteria"]["items"]
    saved = schemas["Case"]["properties"]["criteria"]["items"]
    ref = {"$ref": "#/components/schemas/Condition"}
    assert body == ref and saved["allOf"] == [ref]  # the answer's field is read-only
    condition = schemas["Condition"]
    assert condition["required"] == ["key"]
    assert condition["properties"]["op"]["allOf"] == [
        {"$ref": "#/components/schemas/ConditionOpEnum"}]
    assert {"eq", "in", "exists", "contains"} <= set(schemas["ConditionOpEnum"]["enum"])
