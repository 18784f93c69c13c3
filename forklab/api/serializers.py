"""Output serializers: the JSON shapes of SPEC §4.6, declared key by key.

The values come from ``forklab.runs.serializers_json`` and the engine's ``wire()`` forms,
which are already plain JSON. A :class:`Shape` copies exactly its declared keys out of such
a dict (a missing key is a bug and raises), recursing into nested shapes, so the schema
drf-spectacular generates from these classes is the body the API sends — the fuzz test
checks every response against it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, RootModel
from rest_framework import serializers as s

from forklab.engine.fork.changes import Change
from forklab.engine.fork.wire import (
    CallWire,
    EstimateWire,
    ForkPointWire,
    MemoHit,
    RunDiffWire,
    StoredForkResult,
    SuppressedEffect,
)
from forklab.engine.graph import Condition
from forklab.engine.status import ForkState
from forklab.runs.models import RunKind, RunStatus
from forklab.runs.readmodel import RunView


class Shape(s.Serializer):  # type: ignore[type-arg]
    """An output-only serializer over a JSON-ready dict; ``required=False`` keys may be absent.

    Its fields are built once per class, not per response: DRF deep-copies every declared
    field (nested shapes included) for each serializer instance, which was the largest
    share of answering ``POST /forks/``; output-only shapes read nothing from the binding.
    """

    @property
    def fields(self) -> Any:
        cls = type(self)
        cached = cls.__dict__.get("_shape_fields")
        if cached is None:
            cached = super().fields
            cls._shape_fields = cached  # type: ignore[attr-defined]
        return cached

    def to_representation(self, instance: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, field in self.fields.items():
            if name not in instance and not field.required:
                continue
            value = instance[name]
            if value is not None and isinstance(field, s.BaseSerializer):
                value = field.to_representation(value)
            out[name] = value
        return out


class ChangeWire(RootModel[Change]):
    """A change in its JSON form (SPEC §3.3), documented as the engine's change union."""


def nullable_str(**kw: Any) -> s.CharField:
    return s.CharField(allow_null=True, **kw)


def nullable_int(**kw: Any) -> s.IntegerField:
    return s.IntegerField(allow_null=True, **kw)


JSON_OBJECT = s.DictField  # an object with any values


class ErrorSerializer(Shape):
    code = s.CharField(help_text="Stable error code, e.g. not_found, run_in_progress, "
                                 "fork_point_not_found (see the API description).")
    detail = s.CharField(help_text="What was expected, what was found and what to do.")


# -- runs and events ---------------------------------------------------------------------


class PathStepSerializer(Shape):
    node = s.CharField()
    occurrence = s.IntegerField()
    iteration = s.IntegerField()
    status = s.CharField()


class CostSerializer(Shape):
    input_tokens = s.IntegerField()
    output_tokens = s.IntegerField()
    usd = s.FloatField()


class RunSerializer(Shape):
    id = s.CharField()
    project = s.CharField(help_text="slug of the run's project")
    graph = s.CharField(help_text="graph id")
    graph_version = s.IntegerField()
    run_kind = s.ChoiceField(choices=RunKind.values())
    status = s.ChoiceField(choices=RunStatus.values())
    label = s.CharField(allow_blank=True)  # type: ignore[assignment]  # a field named like Field.label
    parent_run_id = nullable_str()
    fork_sequence_id = nullable_int()
    fork_node_id = nullable_str()
    fork_mutations = s.ListField(child=JSON_OBJECT(), help_text="wire-form changes")
    fork_group_id = nullable_str()
    replay_version = s.IntegerField()
    input = JSON_OBJECT()
    memory = JSON_OBJECT(help_text="final or current memory")
    path = PathStepSerializer(many=True)
    cost = CostSerializer()
    created_at = s.DateTimeField()
    finished_at = s.DateTimeField(allow_null=True)
    error = JSON_OBJECT(allow_null=True, help_text="{code, message, ...} when failed")
    imported = JSON_OBJECT(
        allow_null=True,
        help_text="a run imported from an OpenTelemetry trace: {trace_id, spans, "
                  "conversation, rejected_spans, calls: [{call, kind, tool?, span_id, "
                  "replayable, missing?, capture_hint?}]} (missing and capture_hint when "
                  "the call is inspect-only); null for any other run")


class EventSerializer(Shape):
    seq = s.IntegerField()
    type = s.CharField()
    node = nullable_str()
    occurrence = nullable_int()
    iteration = nullable_int()
    payload = JSON_OBJECT()
    at = s.DateTimeField()


class EventPageSerializer(Shape):
    results = EventSerializer(many=True)
    next = s.URLField(allow_null=True, help_text="the next page, or null at the end")
    next_after = nullable_int(help_text="pass as ?after= for the next page; null at the end")
    last_seq = s.IntegerField(help_text="the run's last event seq")


class ForkPointList(RootModel[list[ForkPointWire]]):
    """A run's addressable boundaries (the engine's fork point shape)."""


# -- diffs and fork results: the engine's wire models ----------------------------------------


class WireField(s.Field):  # type: ignore[type-arg]
    """An output field whose value is in the shape of an engine wire model
    (:mod:`forklab.engine.fork.wire`), documented as that model: the schema of a run diff, a
    call, an estimate or a fork point has one definition, the engine's."""

    def __init__(self, model: type[BaseModel], **kwargs: Any) -> None:
        self.model = model
        kwargs.setdefault("read_only", True)
        super().__init__(**kwargs)

    def to_representation(self, value: Any) -> Any:
        return self.model.model_validate(value).model_dump(
            mode="json", by_alias=True, exclude_unset=True)


def wire_list(model: type[BaseModel], **kwargs: Any) -> s.ListField:
    return s.ListField(child=WireField(model), **kwargs)


class EstimateSerializer(Shape):
    live_calls = s.IntegerField()
    tokens = s.IntegerField()
    cost_usd = s.FloatField()


#: the read model's own fields of a stored result, not in the Fork shape (the dashboard's)
_READ_MODEL_ONLY = ("point", "base_version")
#: the Fork result fields, null until the fork finished (``changes`` are always there: the
#: request's, from the row)
RESULT_FIELDS = tuple(f for f in StoredForkResult.model_fields
                      if f not in ("changes", *_READ_MODEL_ONLY))


class ForkSerializer(RunSerializer):
    """A fork (its read-model view, :class:`~forklab.runs.readmodel.RunView`): its Run
    fields, its state, and — once finished — the Fork result fields."""

    state = s.ChoiceField(choices=ForkState.values())
    not_run_reason = nullable_str(help_text="the error code when state is not_run")
    cancel_requested = s.BooleanField()
    queue_position = nullable_int(help_text="while queued: 0 a worker is starting it, 1 next "
                                            "to start, N waits behind N-1 (the deployment's "
                                            "whole queue counts); null otherwise")
    base_run_id = nullable_str()
    changes = wire_list(ChangeWire)
    effective_fork_sequence_id = nullable_int()
    estimate = WireField(EstimateWire, allow_null=True)
    incurred_cost_usd = s.FloatField(allow_null=True)
    suppressed_effects = wire_list(SuppressedEffect, allow_null=True)
    memo_hits = wire_list(MemoHit, allow_null=True)
    calls = wire_list(CallWire, allow_null=True)
    diff = WireField(RunDiffWire, allow_null=True)
    explain = nullable_str()
    warnings = s.ListField(child=s.CharField(), allow_null=True)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return super().to_representation(_fork_fields(instance))


def _fork_fields(view: RunView) -> dict[str, Any]:
    """The Fork shape's values of a fork's view, its typed result dumped once, here."""
    fork = view.fork
    assert fork is not None, "the Fork shape of a run that is not a fork"
    body = {**view.run_json, "state": fork.state, "not_run_reason": fork.not_run_reason,
            "cancel_requested": fork.cancel_requested, "queue_position": fork.queue_position,
            "base_run_id": fork.base_run_id, "changes": [c.wire() for c in fork.changes],
            **dict.fromkeys(RESULT_FIELDS)}
    if fork.result is not None:
        body.update(fork.result.to_wire())
        for name in _READ_MODEL_ONLY:
            body.pop(name, None)
    elif fork.problem is not None:
        body["warnings"] = [fork.problem]
    return body


class PromoteSerializer(Shape):
    graph_id = s.CharField()
    from_version = s.IntegerField()
    version = s.IntegerField()
    fork_run_id = s.CharField()
    promoted = s.ListField(child=JSON_OBJECT())
    skipped = s.ListField(child=JSON_OBJECT())


# -- graphs and cases --------------------------------------------------------------------


class GraphSerializer(Shape):
    id = s.IntegerField()
    project = s.CharField()
    graph_id = s.CharField()
    name = s.CharField(allow_blank=True)
    latest_version = s.IntegerField()
    created_at = s.DateTimeField()


class GraphVersionSerializer(Shape):
    version = s.IntegerField()
    spec_hash = s.CharField()
    created_at = s.DateTimeField()
    spec = JSON_OBJECT(help_text="the graph spec (GraphSpec wire form)")


class GraphDetailSerializer(GraphSerializer):
    versions = GraphVersionSerializer(many=True)


class GraphRegisteredSerializer(GraphDetailSerializer):
    registered_version = s.IntegerField(help_text="the version the posted spec is stored as")
    created = s.BooleanField(help_text="false when the spec equals the latest version")


class CaseSerializer(Shape):
    id = s.IntegerField()
    project = s.CharField()
    name = s.CharField()
    source_run_id = nullable_str()
    graph = nullable_str()
    graph_version = nullable_int()
    input = JSON_OBJECT()
    changes = s.ListField(child=JSON_OBJECT())
    criteria = wire_list(Condition, help_text="pass criteria: conditions over final memory")
    created_at = s.DateTimeField()


class CaseResultSerializer(Shape):
    project = s.CharField()
    name = s.CharField()
    passed = s.BooleanField()
    failures = s.ListField(child=s.CharField())
    note = s.CharField(allow_blank=True)
    graph_id = s.CharField(allow_null=True, help_text="the graph the case ran against")
    graph_version = s.IntegerField(allow_null=True,
                                   help_text="the version of it the case ran against")


class CasesRunSerializer(Shape):
    passed = s.BooleanField(help_text="true when every case passed")
    total = s.IntegerField()
    failed = s.IntegerField()
    results = CaseResultSerializer(many=True)


# -- pages -------------------------------------------------------------------------------


def page_of(item: type[Shape], name: str) -> type[Shape]:
    """The paginated list ``{count, next, previous, results: [item]}`` (``api.pagination``)."""
    fields = {
        "count": s.IntegerField(),
        "next": s.URLField(allow_null=True),
        "previous": s.URLField(allow_null=True),
        "results": item(many=True),
        "__module__": __name__,
        "__doc__": f"A page of {item.__name__.removesuffix('Serializer')} objects.",
    }
    return type(f"{name}Serializer", (Shape,), fields)


RunPageSerializer = page_of(RunSerializer, "RunPage")
GraphPageSerializer = page_of(GraphSerializer, "GraphPage")
CasePageSerializer = page_of(CaseSerializer, "CasePage")
