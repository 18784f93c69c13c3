"""The wire shapes of forking (SPEC §3.2 to §3.6, §4.3, §4.6), defined once.

A fork request, a sweep request, their policy and budget, the change union (from
:mod:`~forklab.engine.fork.changes`), and the fork result with its run diff, estimate, calls
and fork point are pydantic models here. The engine takes them, the task payload is their
JSON dump, the REST API validates bodies with them and drf-spectacular documents the same
models (no second schema), and the dashboard's forms and the CLI build them.

Invariants:
- a validated :class:`ForkSpec` holds parsed changes (the discriminated union, structural
  limits checked first): a bad change raises the engine's own ``invalid_change`` /
  ``invalid_overrides`` while the body is read, never a loose dict that fails later;
- :meth:`ForkSpec.wire` (and every model's JSON dump) is the SPEC's JSON form, aliases
  included (a route change's ``from``), and validates back to an equal model;
- output models (:class:`ForkResultWire` …) validate the engine's wire dicts and dump them
  in the SPEC's shape (``from_wire(d).to_wire()``), which is what the API sends and what its
  OpenAPI schema documents.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
)

from forklab.engine.errors import ForklabError
from forklab.engine.fork.changes import Change, parse_changes
from forklab.engine.fork.resolve import point_problem
from forklab.engine.inputs import check_json_value, error_path, json_kind
from forklab.engine.status import CallKind, CallLabel, ExecutionStatus, ForkState, RunStatus

ID_PATTERN = r"^[A-Za-z0-9_\-]{1,64}$"
MAX_LABEL = 200


class InvalidRequest(ForklabError):
    """A request body (or a field of one) is not of the documented form."""

    code = "invalid_request"


class WireModel(BaseModel):
    """Base of the request shapes: unknown fields refused, non-finite numbers refused (a
    form's "nan" or "inf" in a number field is an error, not a value), dumps by alias."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, serialize_by_alias=True,
                              validate_by_name=True, validate_by_alias=True)

    def wire(self) -> dict[str, Any]:
        """The JSON form (what the API accepts and the task payload carries)."""
        return self.model_dump(mode="json", by_alias=True)


def parse_request[S: BaseModel](spec: type[S], data: Any) -> S:
    """Validate a request body: values no store can keep are ``invalid_input`` naming their
    path; a bad change is ``invalid_change``/``invalid_overrides``; any other problem is one
    ``invalid_request`` naming the field."""
    if not isinstance(data, dict):
        raise InvalidRequest(f"the request body must be a JSON object, got "
                             f"{json_kind(data)}")
    check_json_value(data, where="body")
    try:
        return spec.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc, data) from None


def build[W: WireModel](spec: type[W], *, under: tuple[str, ...] = (), **fields: Any) -> W:
    """A request model built from typed values (the dashboard's forms, the CLI), checked as
    :func:`parse_request` checks a JSON body: a value that does not fit is one
    ``invalid_request`` naming its field (prefixed by ``under``, e.g. ``("budget",)``), and a value
    no store can keep is ``invalid_input``."""
    try:
        built = spec(**fields)
    except ValidationError as exc:
        raise _invalid(exc, fields, under) from None
    check_json_value(built.wire(), where=".".join(under) or "body")
    return built


def _invalid(exc: ValidationError, data: Any, prefix: tuple[str, ...] = ()) -> InvalidRequest:
    """One ``invalid_request`` naming each field by the user's path in ``data`` (what was
    validated), never pydantic's union members or class names."""
    def field(error: Any) -> str:
        return ".".join((*prefix, error_path(error["loc"], data, error["type"]))).strip(".")

    errors = exc.errors()
    first = field(errors[0]) or "(body)"
    return InvalidRequest(
        f"field '{first}': {errors[0]['msg']}", field=first,
        errors=[{"field": field(e) or "(body)", "msg": e["msg"]} for e in errors[:10]])


# -- policy and budget (SPEC §3.4) -------------------------------------------------------------


class AllowList(WireModel):
    allow: list[str] | Literal[True]


class Policy(WireModel):
    """How the tail treats side effects, and whether it memoizes (SPEC §3.4)."""

    model_config = ConfigDict(frozen=True)

    side_effects: Literal["replay", "block"] | AllowList = "replay"
    memoize: bool = False

    @classmethod
    def parse(cls, data: Policy | dict[str, Any] | None) -> Policy:
        """A policy from None (the default), a policy, or its JSON form."""
        if data is None:
            return cls()
        if isinstance(data, Policy):
            return data
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise _invalid(exc, data, ("policy",)) from None

    def allows(self, node: str) -> bool:
        side = self.side_effects
        return isinstance(side, AllowList) and (side.allow is True or node in side.allow)

    @property
    def blocks_all(self) -> bool:
        return self.side_effects == "block"


DEFAULT_MAX_LIVE_CALLS = 50
DEFAULT_MAX_COST_USD = 1.00


class Budget(WireModel):
    """A fork's caps: live calls and USD (None: no cap)."""

    model_config = ConfigDict(frozen=True)

    max_live_calls: int | None = Field(default=DEFAULT_MAX_LIVE_CALLS, ge=0, le=100_000)
    max_cost_usd: float | None = Field(default=DEFAULT_MAX_COST_USD, ge=0)

    @classmethod
    def parse(cls, data: Budget | dict[str, Any] | None) -> Budget:
        """A budget from None (the defaults), a budget, or its JSON form."""
        if data is None:
            return cls()
        if isinstance(data, Budget):
            return data
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise _invalid(exc, data, ("budget",)) from None

    def explicit(self) -> dict[str, Any]:
        """Only what the caller set (``max_cost_usd: null`` = clear the cost budget)."""
        return self.model_dump(mode="json", exclude_unset=True)


# -- fork points (SPEC §3.2) -------------------------------------------------------------------

_INT = {"type": "integer"}
_OCCURRENCE = {"anyOf": [{"type": "integer", "minimum": 1}, {"const": "last"}],
               "description": "which execution (default 1)"}


def _point(title: str, key: str, value: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"title": title, "type": "object", "required": [key],
            "properties": {key: value, **extra}}


POINT_SCHEMA: dict[str, Any] = {
    "description": "Where to fork (SPEC §3.2). `start`, `failure` (the default for a failed "
                   "run), `human`, a CLI form (`seq:6`, `before:write#2`, `after:write#last`, "
                   "`iteration:2`, `first-write:draft`, `first-read:notes`, `version:3`), or "
                   "one of the objects. Omitted: `failure` for a failed run, else an error.",
    "anyOf": [
        {"type": "string", "examples": ["start", "failure", "before:write#2", "seq:6"]},
        _point("a boundary seq", "sequence", _INT),
        _point("before a node execution", "before_node", {"type": "string"},
               occurrence=_OCCURRENCE),
        _point("after a node execution", "after_node", {"type": "string"},
               occurrence=_OCCURRENCE),
        _point("a loop boundary", "before_iteration", _INT),
        _point("before the first approval gate", "before_human_input", {"const": True}),
        _point("before the first write of a key", "before_first_write_of", {"type": "string"}),
        _point("before the first read of a key", "before_first_read_of", {"type": "string"}),
        _point("a persisted snapshot (source snapshot)", "version", _INT),
        {"type": "null"},
    ],
}

def _checked_point(at: Any) -> Any:
    """An object fork point of the wrong shape is the request's error (400, naming the key),
    not a point that fails to resolve in the run."""
    problem = point_problem(at) if isinstance(at, dict) else None
    if problem is not None:
        key, expected = problem
        field = f"at.{key}" if key else "at"
        raise InvalidRequest(f"field '{field}': expected {expected}", field=field)
    return at


PointSpec = Annotated[str | dict[str, JsonValue] | None, AfterValidator(_checked_point),
                      WithJsonSchema(POINT_SCHEMA)]
"""A fork point as a request names it; the engine resolves it against the base run (an
address that does not resolve is ``fork_point_not_found``, naming what would)."""


# -- changes in a request (SPEC §3.3) ----------------------------------------------------------


def _inlined(value: Any, defs: dict[str, Any]) -> Any:
    """``value`` with every ``$ref`` into ``defs`` replaced by a copy of what it names (a
    branch stands alone: a reply's ``tool_calls`` items, say)."""
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inlined(defs[ref.rsplit("/", 1)[-1]], defs)
        return {k: _inlined(v, defs) for k, v in value.items()}
    if isinstance(value, list):
        return [_inlined(v, defs) for v in value]
    return deepcopy(value)


def _change_schema() -> dict[str, Any]:
    """The change union as one self-contained ``oneOf`` (``kind`` required), derived from the
    change models themselves: a new kind is documented by being in the union."""
    schema = TypeAdapter(Change).json_schema(mode="validation")
    defs = schema.pop("$defs")
    branches = []
    for ref in schema["oneOf"]:
        branch = _inlined(defs[ref["$ref"].rsplit("/", 1)[-1]], defs)
        branch["required"] = ["kind", *(k for k in branch.get("required", []) if k != "kind")]
        branch["properties"]["kind"].pop("default", None)
        branches.append(branch)
    return {"oneOf": branches,
            "description": "One change (SPEC §3.3, §6.3); `target` is a node id or a dotted "
                           "role, `call` a call key (assist#1/turn:2)."}


CHANGE_SCHEMA = _change_schema()
CHANGES_SCHEMA = {"type": "array", "items": CHANGE_SCHEMA}


def _parsed_changes(value: Any) -> Any:
    """A list of wire-form (or built) changes, parsed by the engine so a bad one is its
    ``invalid_change``/``invalid_overrides``; anything but a list is left to pydantic."""
    return parse_changes(value) if isinstance(value, list | tuple) else value


def _parsed_variants(value: Any) -> Any:
    """Each variant's change (or list of changes) parsed; an error names its variant. A
    variant's name labels its fork, so it is non-blank text of at most 200 characters."""
    if not isinstance(value, dict):
        return value
    parsed = {}
    for name, changes in value.items():
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_LABEL:
            raise InvalidRequest(
                f"field 'variants': a variant name is 1 to {MAX_LABEL} characters, not blank "
                f"(it labels the variant's fork); got {str(name)[:40]!r}", field="variants",
                variant=str(name)[:40])
        try:
            parsed[name] = parse_changes(changes if isinstance(changes, list) else [changes])
        except ForklabError as exc:
            exc.context.setdefault("variant", name)
            raise
    return parsed


Changes = Annotated[list[Change], BeforeValidator(_parsed_changes),
                    WithJsonSchema(CHANGES_SCHEMA)]
Variants = Annotated[
    dict[str, list[Change]], BeforeValidator(_parsed_variants),
    WithJsonSchema({"type": "object", "minProperties": 1, "maxProperties": 32,
                    "description": "variant name → one change or a list of changes",
                    "propertyNames": {"minLength": 1, "maxLength": MAX_LABEL},
                    "additionalProperties": {"anyOf": [CHANGES_SCHEMA, CHANGE_SCHEMA]}}),
]


# -- requests (SPEC §4.3) ----------------------------------------------------------------------


class ForkSpec(WireModel):
    """A fork request: the base run, where to fork, what to change, policy and budget."""

    model_config = ConfigDict(title="ForkSpec")

    base_run: str = Field(pattern=ID_PATTERN)
    at: PointSpec = None
    changes: Changes = Field(default_factory=list)
    policy: Policy = Field(default_factory=Policy)
    budget: Budget = Field(default_factory=Budget)
    label: str = Field(default="", max_length=MAX_LABEL)
    client_request_id: str | None = Field(default=None, max_length=200)
    ignore_budget: bool = False
    source: Literal["events", "snapshot", "auto"] = "events"
    graph_version: int | None = Field(default=None, ge=1)
    run_id: str | None = Field(default=None, pattern=ID_PATTERN)


class SweepSpec(WireModel):
    """A sweep: one fork per named variant, from the same run at the same point."""

    model_config = ConfigDict(title="SweepSpec")

    base_run: str = Field(pattern=ID_PATTERN)
    at: PointSpec = None
    variants: Variants = Field(min_length=1, max_length=32)
    policy: Policy = Field(default_factory=Policy)
    budget: Budget = Field(default_factory=Budget)
    concurrency: int = Field(default=4, ge=1, le=16)
    ignore_budget: bool = False
    label: str = Field(default="", max_length=MAX_LABEL)

    def variant(self, name: str) -> ForkSpec:
        """The fork request of one variant (labelled with its name)."""
        return ForkSpec(base_run=self.base_run, at=self.at, changes=self.variants[name],
                        policy=self.policy, budget=self.budget, label=name,
                        ignore_budget=self.ignore_budget)


# -- results (SPEC §4.6) -----------------------------------------------------------------------


class OutModel(BaseModel):
    """Base of the result shapes. ``from_wire(d).to_wire()`` is ``d`` in the SPEC's shape: a
    key the engine left out (``score`` without a scorer) stays out, and the dashboard-only
    ``not_reached`` marks of a diff are dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    @classmethod
    def from_wire(cls, data: Any) -> Self:
        return cls.model_validate(data)

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class EstimateWire(OutModel):
    """What the tail is predicted to spend — a prediction, not a bound: tokens and cost are
    priced at the recorded token counts, and a change that makes answers longer makes the
    nodes reading them (a join of parallel branches most) send longer requests. What bounds
    spend is the budget, checked before every call against its worst case."""

    live_calls: int
    tokens: int
    cost_usd: float = Field(description="predicted at the recorded token counts under the "
                                        "fork's models; not an upper bound")


class ForkPointWire(OutModel):
    """An addressable boundary: the seq before a node starts (SPEC §3.2, §4.6)."""

    seq: int
    node: str | None
    occurrence: int | None
    iteration: int | None
    kind: Literal["before_node", "before_call", "end"]
    label: str = Field(description="human text, e.g. before 'write' execution 1, iteration 1")
    run_id: str | None = Field(default=None, description=(
        "the run whose log holds this boundary (on a fork, an inherited one is held by an "
        "ancestor)"))
    call: str | None = Field(default=None, description=(
        "before_call: the call key (assist#1/turn:3); the node re-executes with the calls "
        "recorded before it served from the log"))


class SuppressedEffect(OutModel):
    node: str
    inputs: JsonValue
    reason: str


class MemoHit(OutModel):
    node: str
    occurrence: int


class CallWire(OutModel):
    """One call of the tail with its provenance label."""

    seq: int
    node: str
    occurrence: int
    role: str | None
    kind: CallKind
    label: CallLabel
    model: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    call: str | None = None  # the call key (``assist#1/turn:2``) of a call inside a loop


class PathEntry(OutModel):
    node: str
    occurrence: int
    iteration: int
    status: ExecutionStatus


class AlignedStep(OutModel):
    op: Literal["same", "changed", "inserted", "skipped"]
    base: PathEntry | None
    variant: PathEntry | None
    # the dashboard's mark of a base step a stopped variant never reached; not in SPEC §4.6
    not_reached: bool | None = Field(default=None, exclude=True)


class DiffPath(OutModel):
    aligned: list[AlignedStep]
    inserted: list[str]
    skipped: list[str]
    not_reached: list[str] | None = Field(default=None, exclude=True)
    # a one-call fork of an imported run (SPEC §8 (a)): the call it re-asked, and the base
    # steps after it, not re-executed (so not in ``skipped``)
    one_call: str | None = None
    not_reexecuted: list[str] | None = None


class Divergence(OutModel):
    index: int
    base: str | None
    variant: str | None


class MemoryDelta(OutModel):
    op: Literal["added", "removed", "changed"]
    bytes_delta: int
    taint_moved: bool
    base: JsonValue
    variant: JsonValue


class Terminal(OutModel):
    base: str
    variant: str
    iterations_delta: int
    wall_clock_delta_ms: float


class NodeCost(OutModel):
    base_usd: float
    variant_usd: float
    delta_usd: float


class DiffCost(OutModel):
    tokens_delta: int
    usd_delta: float | None
    incurred_usd: float | None
    per_node: dict[str, NodeCost]


class Score(OutModel):
    base: float
    variant: float
    delta: float


class RunDiffWire(OutModel):
    """What became different between two runs (SPEC §3.5, §4.6)."""

    divergence: Divergence | None
    path: DiffPath
    memory: dict[str, MemoryDelta]
    terminal: Terminal
    cost: DiffCost
    suppressed_effects: list[SuppressedEffect]
    attribution: Literal["single", "combined"]
    score: Score | None = None


class PreflightWire(OutModel):
    """What a fork would do and cost (``POST /forks/preflight/``); it starts nothing."""

    fork_sequence_id: int
    fork_node_id: str | None
    effective_fork_sequence_id: int
    events_reused: int
    estimate: EstimateWire
    warnings: list[str]
    point: ForkPointWire
    effective_point: ForkPointWire = Field(exclude=True)  # the engine's; the API sends the seq
    changes: list[Change]


class StoredForkResult(OutModel):
    """The result fields of a finished fork as the read model stores them (one row per fork,
    ``runs.projections.ForkResultProjection``): what ``GET /forks/{id}/`` adds to the Run."""

    effective_fork_sequence_id: int
    changes: list[Change]
    estimate: EstimateWire
    incurred_cost_usd: float | None
    suppressed_effects: list[SuppressedEffect]
    memo_hits: list[MemoHit]
    calls: list[CallWire]
    diff: RunDiffWire | None
    explain: str
    warnings: list[str]
    # where it forked (the dashboard's headers read it, not the run.forked event); None in
    # a row stored before it was kept (still served: its base may be gone, so no rebuild)
    point: ForkPointWire | None = None
    # the base's last seq ``diff`` was computed against: while the base is still at it, the
    # stored diff is the fork's diff against its base (the dashboard's diff page shows it
    # instead of diffing both states again); None in a row stored before it was kept, and
    # when the diff marks base steps a stopped fork never reached (the stored form leaves
    # those marks out, so it would show them as skipped)
    base_version: int | None = None

    @classmethod
    def of(cls, result: ForkResultWire, *, base_version: int) -> StoredForkResult:
        whole = result.diff is None or not result.diff.path.not_reached
        return cls.model_validate({**result.model_dump(include=set(cls.model_fields),
                                                      exclude_unset=True),
                                   "base_version": base_version if whole else None})

    def diff_against(self, base_last_seq: int) -> RunDiffWire | None:
        """The stored diff when it is the fork's diff against its base at ``base_last_seq``
        (the base has not changed since it was computed), else None."""
        return self.diff if self.base_version == base_last_seq else None


class ForkResultWire(OutModel):
    """The fork-specific fields of a finished fork (SPEC §4.6); the API adds the variant
    Run's fields around them. ``changes`` are the fork's combined ``fork_mutations``."""

    run_id: str | None
    base_run_id: str
    fork_sequence_id: int
    fork_node_id: str | None
    effective_fork_sequence_id: int
    changes: list[Change]
    estimate: EstimateWire
    incurred_cost_usd: float | None
    suppressed_effects: list[SuppressedEffect]
    memo_hits: list[MemoHit]
    calls: list[CallWire]
    diff: RunDiffWire | None
    explain: str
    warnings: list[str]
    unpriced_calls: int
    point: ForkPointWire


# -- sweeps ----------------------------------------------------------------------------------


class VariantEstimateWire(EstimateWire):
    """One variant's predicted spend, with its plan's warnings."""

    warnings: list[str]


class SweepEstimateWire(OutModel):
    """What a sweep would spend (``POST /sweeps/estimate/``); it starts nothing."""

    cost_usd: float
    lines: list[str]
    variants: dict[str, VariantEstimateWire]


class DiffSummaryWire(OutModel):
    """A finished variant's RunDiff against the base, in brief."""

    divergence: Divergence | None
    terminal: Terminal
    tokens_delta: int
    usd_delta: float | None
    incurred_usd: float | None
    memory: dict[str, Literal["added", "removed", "changed"]]
    inserted: list[str]
    skipped: list[str]
    suppressed_effects: int = Field(description="how many effects were blocked")

    @classmethod
    def of(cls, diff: RunDiffWire) -> DiffSummaryWire:
        return cls(divergence=diff.divergence, terminal=diff.terminal,
                   tokens_delta=diff.cost.tokens_delta, usd_delta=diff.cost.usd_delta,
                   incurred_usd=diff.cost.incurred_usd,
                   memory={key: delta.op for key, delta in diff.memory.items()},
                   inserted=list(diff.path.inserted), skipped=list(diff.path.skipped),
                   suppressed_effects=len(diff.suppressed_effects))


class SweepVariantWire(OutModel):
    run_id: str
    status: RunStatus
    state: ForkState
    not_run_reason: str | None
    incurred_cost_usd: float | None
    error: dict[str, JsonValue] | None
    diff: DiffSummaryWire | None = Field(description="when the variant finished")


class SweepWire(OutModel):
    """A sweep (``GET /sweeps/{id}/``): each variant's state, cost and diff summary."""

    fork_group_id: str
    base_run_id: str | None
    fork_sequence_id: int | None
    incurred_cost_usd: float | None
    variants: dict[str, SweepVariantWire]
