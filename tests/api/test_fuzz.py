"""Schemathesis fuzzes every operation of the API against the API's own OpenAPI schema.

Authenticated as a project admin, against the shared test world. Each operation gets a
bounded number of generated requests (``MAX_EXAMPLES``); path parameters and the runs and
graphs a body names are drawn partly from real ids, so requests get past "not found" into
the fork machinery. Checks: no 5xx, every status documented, every body (success or error)
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
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.parameters import CONTAINER_TO_LOCATION
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from forklab.runs.models import Graph
from tests.api.conftest import World

pytestmark = pytest.mark.django_db

MAX_EXAMPLES = 25
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, negative_data_rejection]

KNOWN: dict[str, list[Any]] = {}  # path parameter / body field -> real values


def generated_schema() -> dict[str, Any]:
    """What ``/api/schema/`` serves, generated in-process (the URLs as ``forklab.urls``
    mounts them)."""
    from django.urls import include, path
    from drf_spectacular.generators import SchemaGenerator

    generator = SchemaGenerator(patterns=[path("api/", include("forklab.api.urls"))])
    return json.loads(json.dumps(generator.get_schema(request=None, public=True)))


schema = schemathesis.openapi.from_dict(generated_schema())
schema.app = WSGIHandler()


@pytest.fixture
def known_ids(world: World) -> Iterator[None]:
    """Real ids for the hooks below, and Django's test-client treatment of connections."""
    from forklab.runs import forking
    from forklab.runs.specs import ForkSpec, SweepSpec

    admin = world.users["admin"]
    fork = forking.start_fork(user=admin, spec=ForkSpec(base_run=world.lab_diamond, at="start"))
    group = forking.start_sweep(user=admin, spec=SweepSpec.model_validate({
        "base_run": world.lab_diamond, "at": "start",
        "variants": {"a": {"kind": "temperature", "target": "left", "temperature": 0.9}}}))
    runs = [world.lab_diamond, world.lab_paused, fork.run.id, world.demo_runs["diamond"]]
    KNOWN.update(run_id=runs, base_run=runs, base=runs, variant=runs, group_id=[group],
                 key=[*Graph.objects.values_list("graph_id", flat=True).distinct(),
                      *(str(pk) for pk in Graph.objects.values_list("pk", flat=True))],
                 graph=["diamond", "order-fulfilment"])
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
        KNOWN.clear()


def _with_real(case: Any, container: str, name: str, value: Any) -> Any:
    setattr(case, container, {**getattr(case, container), name: value})
    return case


@schemathesis.hook
def flatmap_case(context: Any, case: Any) -> Any:
    """The generated case, or the same with one field of a positive (schema-valid) component
    replaced by a real id; negative components stay as generated, so they stay invalid."""
    options = [st.just(case)]
    for container, location in CONTAINER_TO_LOCATION.items():
        values = getattr(case, container, None)
        if not isinstance(values, dict) or (case._meta is not None
                                            and case._meta.is_negative_at(location)):
            continue
        for name in values:
            if KNOWN.get(name):
                options.append(st.sampled_from(KNOWN[name]).map(
                    lambda real, c=container, n=name: _with_real(case, c, n, real)))
    return st.one_of(options)


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_the_api_conforms_to_its_schema_and_never_fails_on_input(
    case: Any, world: World, known_ids: None,
) -> None:
    case.call_and_validate(headers={"Authorization": f"Token {world.tokens['admin']}"},
                           checks=CHECKS)
