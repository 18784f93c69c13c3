"""Schemathesis fuzzes every operation of the API against the API's own OpenAPI schema.

Authenticated as a project admin, against the shared test world. Each operation gets a
bounded number of generated requests (``MAX_EXAMPLES`` in the fuzzing phase, plus
schemathesis' example and coverage phases). The schema gets examples naming the test world's
runs, graphs and sweep, so generated requests get past "not found" into the fork machinery. Checks: no 5xx, every status documented, every body (success or error)
valid against the documented schema, and schema-violating requests rejected with a 4xx.

The WSGI app is Django's own handler, called in the test's thread so it shares the test's
transaction (everything it writes is rolled back); as in Django's test client, connections
are not closed between requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import World

pytestmark = pytest.mark.django_db

MAX_EXAMPLES = 25
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, negative_data_rejection]

KNOWN: dict[str, str] = {}  # example token -> the test world's id


def generated_schema() -> dict[str, Any]:
    """What ``/api/schema/`` serves, generated in-process (the URLs as ``forklab.urls``
    mounts them)."""
    from django.urls import include, path
    from drf_spectacular.generators import SchemaGenerator

    generator = SchemaGenerator(patterns=[path("api/", include("forklab.api.urls"))])
    return json.loads(json.dumps(generator.get_schema(request=None, public=True)))


RUN_TOKENS = ["real-run-completed", "real-run-paused", "real-fork-queued", "real-run-elsewhere"]


def with_real_examples(raw: dict[str, Any]) -> dict[str, Any]:
    """Examples that name the test world's runs, graphs and sweep (as tokens: the ids exist
    only once the world is built; ``before_call`` swaps them in), so generated requests get
    past "not found" into the fork machinery. Only examples are added: the schema's types and
    constraints are the served ones."""
    comps = raw["components"]["schemas"]
    for name in ("ForkSpec", "SweepSpec"):
        props = comps[name]["properties"]
        props["base_run"]["examples"] = ["real-run-completed"]
        props["at"]["examples"] = ["start", {"before_node": "left"}, {"after_node": "plan"},
                                   {"before_human_input": True}, "before:join#last"]
    comps["ForkSpec"]["properties"]["changes"]["examples"] = [
        [{"kind": "prompt", "target": "left", "system_prompt": "Brief."}],
        [{"kind": "memory", "set": {"plan": "one step"}, "delete": ["left"]}],
        [{"kind": "human_response", "decision": "approved"}],
        [{"kind": "input_patch", "patch": {"task": None}}],
        [{"kind": "output", "node": "right", "memory": {"right": "stub"}}],
        [{"kind": "route", "from": "plan", "to": "join"}],
        [{"kind": "config", "node": "left", "patch": {"prompt": "Other {plan}"}}]]
    comps["RunSpec"]["properties"]["graph"]["examples"] = ["diamond", "order-fulfilment"]
    names = {"run_id": RUN_TOKENS, "base": RUN_TOKENS, "variant": RUN_TOKENS,
             "group_id": ["real-sweep"], "key": ["diamond", "order-fulfilment"]}
    for operations in raw["paths"].values():
        for operation in operations.values():
            for param in operation.get("parameters", []):
                if param["name"] in names:
                    param["schema"]["examples"] = names[param["name"]]
    return raw


# The coverage phase enumerates every boundary of every property: for a sweep's variants
# (ten change kinds, each way) and a full graph spec that is ~1,000 requests an operation.
# Those operations get the examples and fuzzing phases only, to keep this test near a minute.
#
# The sweep operations are fuzzed with valid shapes only: for an object whose
# additionalProperties is a discriminated union (a sweep's ``variants``), schemathesis 4.x's
# negative generator can build a complement it cannot draw from and raises UnsupportedSchema
# mid-draw (a generator limitation, rare and seed-dependent, seen failing CI). Malformed
# sweeps are covered by tests/api/test_forks.py (bad variants -> 400/422) and by the negative
# fuzzing of POST /forks/, which shares every change schema.
CONFIG = SchemathesisConfig.from_dict({"operations": [
    {"include-operation-id": ["graphs_create"],
     "phases": {"coverage": {"enabled": False}}},
    {"include-operation-id": ["sweeps_create", "sweeps_estimate"],
     "phases": {"coverage": {"enabled": False}},
     "generation": {"mode": "positive"}},
]})
schema = schemathesis.openapi.from_dict(with_real_examples(generated_schema()), config=CONFIG)
schema.app = WSGIHandler()


@pytest.fixture
def known_ids(world: World) -> Iterator[None]:
    """The ids behind the example tokens, and Django's test-client treatment of
    connections (not closed between requests, so the test's transaction survives)."""
    from forklab.runs import forking
    from forklab.runs.specs import ForkSpec, SweepSpec

    admin = world.users["admin"]
    fork = forking.start_fork(user=admin, spec=ForkSpec(base_run=world.lab_diamond, at="start"))
    group = forking.start_sweep(user=admin, spec=SweepSpec.model_validate({
        "base_run": world.lab_diamond, "at": "start",
        "variants": {"a": {"kind": "temperature", "target": "left", "temperature": 0.9}}}))
    KNOWN.update({"real-run-completed": world.lab_diamond, "real-run-paused": world.lab_paused,
                  "real-fork-queued": fork.run.id,
                  "real-run-elsewhere": world.demo_runs["diamond"], "real-sweep": group})
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
        KNOWN.clear()


def _swap(value: Any) -> Any:
    return KNOWN.get(value, value) if isinstance(value, str) else value


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    for container in ("path_parameters", "query", "body"):
        values = getattr(case, container, None)
        if isinstance(values, dict) and any(_swap(v) is not v for v in values.values()):
            setattr(case, container, {k: _swap(v) for k, v in values.items()})


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_the_api_conforms_to_its_schema_and_never_fails_on_input(
    case: Any, world: World, known_ids: None,
) -> None:
    case.call_and_validate(headers={"Authorization": f"Token {world.tokens['admin']}"},
                           checks=CHECKS)
