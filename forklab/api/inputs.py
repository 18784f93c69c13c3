"""Input serializers: query parameters (DRF) and the request bodies the runs layer lacks.

Request bodies are pydantic models — ``forklab.runs.specs`` for forks, sweeps, answers,
cases and runs (shared with the dashboard and CLI), and the two below — validated by
``specs.parse`` into one ``invalid_request`` error naming the field, and documented in the
OpenAPI schema through drf-spectacular's pydantic extension. Query parameters are DRF
serializers, so drf-spectacular documents them and a bad value is ``invalid_request`` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, StrictInt
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from rest_framework import serializers as s
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from forklab.engine import inputs
from forklab.engine.graph import GraphSpec
from forklab.runs.models import RunKind, RunStatus
from forklab.runs.specs import parse

# -- bodies --------------------------------------------------------------------------------


class DocumentedAs:
    """A field validated as it is typed but documented as ``shape`` (its JSON Schema, with
    the shape's own definitions shared in the document)."""

    def __init__(self, shape: type[BaseModel]) -> None:
        self.shape = shape

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(self.shape.__pydantic_core_schema__)


class GraphRegistration(BaseModel):
    """``POST /graphs/``: a graph spec, and the project to store it in."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(
        default=None, max_length=100,
        description="project slug; may be omitted when you are admin of exactly one project")
    # validated as a plain object, so a bad graph is reported by the engine's own validator
    # (``invalid_graph`` naming the node and field), not as a body error; documented as the
    # engine's GraphSpec
    spec: Annotated[dict[str, Any], DocumentedAs(GraphSpec)] = Field(
        description="the graph (GraphSpec: id, start, nodes, edges…)")


class CasesRunSpec(BaseModel):
    """``POST /cases/run/``: replay every case you can read, or one project's."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(default=None, max_length=100, description="project slug")
    graph_version: StrictInt | None = Field(  # strict: JSON's true is not version 1
        default=None, ge=1, le=2**31 - 1,
        description="run every case against this version of its graph (default: the "
                    "graph's current version); each result names the version it ran")


class NoFields(BaseModel):
    """The body of an action that takes no parameters (``cancel``, ``promote``): empty, or
    ``{}``; any field in it is ``invalid_request`` naming it, never silently ignored."""

    model_config = ConfigDict(extra="forbid", title="NoFields")


class PromoteFields(BaseModel):
    """The body of ``promote``: empty, ``{}``, or ``{"only_applied": true}`` (leave out, and
    list in ``skipped``, a config change the fork's tail never applied instead of refusing
    it with ``promote_conflict``)."""

    model_config = ConfigDict(extra="forbid", title="PromoteFields")
    only_applied: bool = False


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser behind the edge checks (``forklab.engine.inputs``).

    The body's size (``FORKLAB_MAX_BODY_BYTES``) and bracket depth are checked on the raw
    text before the parser recurses into it, so JSON nested thousands deep is a 400
    ``invalid_input``, not a ``RecursionError``; ``NaN``/``Infinity`` are refused while
    parsing; unencodable strings (``"\\ud800"``) and NUL after. Malformed JSON stays DRF's
    ``parse_error``.
    """

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        limit = settings.FORKLAB_MAX_BODY_BYTES
        raw = stream.read(limit + 1) if stream is not None else b""
        charset = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        try:
            return inputs.loads(raw.decode(charset), where="body", max_bytes=limit)
        except ValueError as exc:  # malformed JSON, or bytes that are not the charset
            raise ParseError(f"JSON parse error - {exc}") from None


def body[M: BaseModel](model: type[M], data: Any) -> M:
    """Validate a JSON body (no body at all reads as ``{}``: DRF's empty data)."""
    return parse(model, data)


# -- query parameters ----------------------------------------------------------------------

#: the largest integer a query parameter takes (larger ones are 400, never a database error)
MAX_QUERY_INT = 2**31 - 1


class Query(s.Serializer):  # type: ignore[type-arg]
    """Validate ``request.query_params``; a bad value raises ``invalid_request`` (400).

    An empty optional parameter (``?status=``, as an HTML form sends it) means "not given".
    """

    @classmethod
    def read(cls, query: Any) -> dict[str, Any]:
        serializer = cls(data=query)
        serializer.is_valid(raise_exception=True)
        return {k: v for k, v in serializer.validated_data.items() if v not in (None, "")}


class RunFilters(Query):
    kind = s.ChoiceField(choices=RunKind.values(), required=False, allow_blank=True, help_text="run_kind")
    status = s.ChoiceField(choices=RunStatus.values(), required=False, allow_blank=True)
    graph = s.CharField(required=False, allow_blank=True, max_length=100, help_text="graph id")
    # a query parameter named like Field.parent (DRF's metaclass collects it as a field)
    parent = s.CharField(required=False, allow_blank=True, max_length=64,  # type: ignore[assignment]
                         help_text="parent run id")
    project = s.CharField(required=False, allow_blank=True, max_length=100, help_text="project slug")
    trace_id = s.RegexField(r"^[0-9a-fA-F]{32}$", required=False, allow_blank=True,
                            help_text="an imported run's OpenTelemetry trace id (32 hex digits)")
    conversation = s.CharField(required=False, allow_blank=True, max_length=200,
                               help_text="imported runs of one conversation "
                                         "(gen_ai.conversation.id / session.id)")


class EventFilters(Query):
    type = s.CharField(required=False, allow_blank=True, max_length=64, help_text="event type, e.g. node.completed")
    after = s.IntegerField(required=False, min_value=0, max_value=MAX_QUERY_INT, default=0,
                           help_text="only events with seq > after")
    limit = s.IntegerField(required=False, min_value=1, max_value=5000, default=500)


class DiffQuery(Query):
    base = s.CharField(max_length=64, help_text="base run id")
    variant = s.CharField(max_length=64, help_text="variant run id")


class GraphFilters(Query):
    project = s.CharField(required=False, allow_blank=True, max_length=100, help_text="project slug")
    graph_id = s.CharField(required=False, allow_blank=True, max_length=100)


class GraphLookup(Query):
    project = s.CharField(required=False, allow_blank=True, max_length=100,
                          help_text="project slug, when {id} is a graph id used in several of "
                                    "your projects")


class CaseFilters(Query):
    project = s.CharField(required=False, allow_blank=True, max_length=100, help_text="project slug")
