"""Output serializers: the JSON shapes of SPEC §4.6, declared key by key.

The values come from ``forklab.runs.serializers_json`` and the engine's ``wire()`` forms,
which are already plain JSON. A :class:`Shape` copies exactly its declared keys out of such
a dict (a missing key is a bug and raises), recursing into nested shapes, so the schema
drf-spectacular generates from these classes is the body the API sends — the fuzz test
checks every response against it.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers as s

from forklab.runs.models import RunKind, RunStatus


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
    run_kind = s.ChoiceField(choices=RunKind.values)
    status = s.ChoiceField(choices=RunStatus.values)
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


class ForkPointSerializer(Shape):
    seq = s.IntegerField()
    node = nullable_str()
    occurrence = nullable_int()
    iteration = nullable_int()
    kind = s.ChoiceField(choices=["before_node", "end"])
    label = s.CharField()  # type: ignore[assignment]  # a field named like Field.label
    run_id = nullable_str(help_text="the run whose log holds this boundary (on a fork, an "
                                    "inherited one is held by an ancestor)")


# -- diffs -------------------------------------------------------------------------------


class DivergenceSerializer(Shape):
    index = s.IntegerField()
    base = nullable_str()
    variant = nullable_str()


class AlignedStepSerializer(Shape):
    op = s.ChoiceField(choices=["same", "changed", "inserted", "skipped"])
    base = PathStepSerializer(allow_null=True)
    variant = PathStepSerializer(allow_null=True)


class DiffPathSerializer(Shape):
    aligned = AlignedStepSerializer(many=True)
    inserted = s.ListField(child=s.CharField())
    skipped = s.ListField(child=s.CharField())


class MemoryDeltaSerializer(Shape):
    op = s.ChoiceField(choices=["added", "removed", "changed"])
    bytes_delta = s.IntegerField()
    taint_moved = s.BooleanField()
    base = s.JSONField(help_text="any JSON value, null when the key is absent")
    variant = s.JSONField(help_text="any JSON value, null when the key is absent")


class TerminalSerializer(Shape):
    base = s.CharField()
    variant = s.CharField()
    iterations_delta = s.IntegerField()
    wall_clock_delta_ms = s.FloatField()


class NodeCostSerializer(Shape):
    base_usd = s.FloatField()
    variant_usd = s.FloatField()
    delta_usd = s.FloatField()


class DiffCostSerializer(Shape):
    tokens_delta = s.IntegerField()
    usd_delta = s.FloatField(allow_null=True, help_text="null when either run called an "
                             "unpriced model (the delta is unknown)")
    incurred_usd = s.FloatField(allow_null=True, help_text="what the tail spent (inherited "
                                "prefix excluded); null when it called an unpriced model")
    per_node = s.DictField(child=NodeCostSerializer())


class SuppressedEffectSerializer(Shape):
    node = s.CharField()
    inputs = s.JSONField()
    reason = s.CharField()


class ScoreSerializer(Shape):
    base = s.FloatField()
    variant = s.FloatField()
    delta = s.FloatField()


class RunDiffSerializer(Shape):
    divergence = DivergenceSerializer(allow_null=True)
    path = DiffPathSerializer()
    memory = s.DictField(child=MemoryDeltaSerializer())
    terminal = TerminalSerializer()
    cost = DiffCostSerializer()
    suppressed_effects = SuppressedEffectSerializer(many=True)
    score = ScoreSerializer(required=False, help_text="only when a scorer was supplied")
    attribution = s.ChoiceField(choices=["single", "combined"])


# -- forks -------------------------------------------------------------------------------


class EstimateSerializer(Shape):
    live_calls = s.IntegerField()
    tokens = s.IntegerField()
    cost_usd = s.FloatField()


class PreflightSerializer(Shape):
    fork_sequence_id = s.IntegerField()
    fork_node_id = nullable_str()
    effective_fork_sequence_id = s.IntegerField()
    events_reused = s.IntegerField()
    estimate = EstimateSerializer()
    warnings = s.ListField(child=s.CharField())
    point = ForkPointSerializer()
    changes = s.ListField(child=JSON_OBJECT())


class CallSerializer(Shape):
    seq = s.IntegerField()
    node = s.CharField()
    occurrence = s.IntegerField()
    role = nullable_str()
    kind = s.ChoiceField(choices=["agent", "tool", "human", "subgraph"])
    label = s.ChoiceField(choices=["reused", "live", "simulated", "changed"])  # type: ignore[assignment]  # a field named like Field.label
    model = nullable_str()
    input_tokens = s.IntegerField()
    output_tokens = s.IntegerField()
    cost_usd = s.FloatField(allow_null=True, help_text="null: unpriced model")


class MemoHitSerializer(Shape):
    node = s.CharField()
    occurrence = s.IntegerField()


FORK_STATES = ["queued", "running", "paused", "complete", "failed", "blocked", "not_run",
               "cancelled"]


class ForkSerializer(RunSerializer):
    """A fork: its Run fields, its state, and — once finished — the Fork result fields."""

    state = s.ChoiceField(choices=FORK_STATES)
    not_run_reason = nullable_str(help_text="the error code when state is not_run")
    cancel_requested = s.BooleanField()
    queue_position = nullable_int(help_text="while queued: 0 a worker is starting it, 1 next "
                                            "to start, N waits behind N-1 (the deployment's "
                                            "whole queue counts); null otherwise")
    base_run_id = nullable_str()
    changes = s.ListField(child=JSON_OBJECT())
    effective_fork_sequence_id = nullable_int()
    estimate = EstimateSerializer(allow_null=True)
    incurred_cost_usd = s.FloatField(allow_null=True)
    suppressed_effects = SuppressedEffectSerializer(many=True, allow_null=True)
    memo_hits = MemoHitSerializer(many=True, allow_null=True)
    calls = CallSerializer(many=True, allow_null=True)
    diff = RunDiffSerializer(allow_null=True)
    explain = nullable_str()
    warnings = s.ListField(child=s.CharField(), allow_null=True)


class PromoteSerializer(Shape):
    graph_id = s.CharField()
    from_version = s.IntegerField()
    version = s.IntegerField()
    fork_run_id = s.CharField()
    promoted = s.ListField(child=JSON_OBJECT())
    skipped = s.ListField(child=JSON_OBJECT())


# -- sweeps ------------------------------------------------------------------------------


class VariantEstimateSerializer(EstimateSerializer):
    warnings = s.ListField(child=s.CharField())


class SweepEstimateSerializer(Shape):
    cost_usd = s.FloatField()
    lines = s.ListField(child=s.CharField())
    variants = s.DictField(child=VariantEstimateSerializer())


class DiffSummarySerializer(Shape):
    divergence = DivergenceSerializer(allow_null=True)
    terminal = TerminalSerializer()
    tokens_delta = s.IntegerField()
    usd_delta = s.FloatField(allow_null=True)
    incurred_usd = s.FloatField(allow_null=True)
    memory = s.DictField(child=s.ChoiceField(choices=["added", "removed", "changed"]))
    inserted = s.ListField(child=s.CharField())
    skipped = s.ListField(child=s.CharField())
    suppressed_effects = s.IntegerField(help_text="how many effects were blocked")


class SweepVariantSerializer(Shape):
    run_id = s.CharField()
    status = s.ChoiceField(choices=RunStatus.values)
    state = s.ChoiceField(choices=FORK_STATES)
    not_run_reason = nullable_str()
    incurred_cost_usd = s.FloatField(allow_null=True)
    error = JSON_OBJECT(allow_null=True)
    diff = DiffSummarySerializer(allow_null=True, help_text="when the variant finished")


class SweepSerializer(Shape):
    fork_group_id = s.CharField()
    base_run_id = nullable_str()
    fork_sequence_id = nullable_int()
    incurred_cost_usd = s.FloatField(allow_null=True)
    variants = s.DictField(child=SweepVariantSerializer())


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
    criteria = s.ListField(child=JSON_OBJECT())
    created_at = s.DateTimeField()


class CaseResultSerializer(Shape):
    project = s.CharField()
    name = s.CharField()
    passed = s.BooleanField()
    failures = s.ListField(child=s.CharField())
    note = s.CharField(allow_blank=True)


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
