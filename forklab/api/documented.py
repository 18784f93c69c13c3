"""The documented forms of the fork and sweep bodies: fork points and changes spelled out.

``runs.specs.ForkSpec`` and ``SweepSpec`` validate ``at`` and ``changes`` loosely (any string
or object) and leave the rest to the engine, whose errors name what is wrong (422
``fork_point_not_found``, ``invalid_change``…). The schema should still say what the forms
are, so the classes here copy the specs with ``at`` and the changes annotated by the point
forms of SPEC §3.2 and the engine's own change models (§3.3). They are used only for the
OpenAPI schema; views validate with the specs themselves (``test_schema`` checks that both
have the same fields).
"""

from __future__ import annotations

from copy import deepcopy
from typing import Annotated, Any

from pydantic import ConfigDict, Field, TypeAdapter, WithJsonSchema

from forklab.api import inputs
from forklab.engine.fork.changes import Change
from forklab.engine.graph import GraphSpec
from forklab.runs import specs

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


def _change_schema() -> dict[str, Any]:
    """The engine's change models as one self-contained ``oneOf`` (``kind`` required)."""
    schema = TypeAdapter(Change).json_schema(mode="validation")
    defs = schema.pop("$defs")
    branches = []
    for ref in schema["oneOf"]:
        branch = deepcopy(defs[ref["$ref"].rsplit("/", 1)[-1]])
        branch["required"] = ["kind", *(k for k in branch.get("required", []) if k != "kind")]
        branch["properties"]["kind"].pop("default", None)
        branches.append(branch)
    return {"oneOf": branches,
            "description": "One change (SPEC §3.3); `target` is a node id or a dotted role."}


CHANGE_SCHEMA = _change_schema()
CHANGES_SCHEMA = {"type": "array", "items": CHANGE_SCHEMA}

Point = Annotated[str | dict[str, Any] | None, WithJsonSchema(POINT_SCHEMA)]
Changes = Annotated[list[dict[str, Any]], WithJsonSchema(CHANGES_SCHEMA)]
Variants = Annotated[
    dict[str, list[dict[str, Any]] | dict[str, Any]],
    WithJsonSchema({"type": "object", "minProperties": 1, "maxProperties": 32,
                    "description": "variant name → one change or a list of changes",
                    "additionalProperties": {"anyOf": [CHANGES_SCHEMA, CHANGE_SCHEMA]}}),
]


class ForkSpec(specs.ForkSpec):
    """A fork request: the base run, where to fork, what to change, policy and budget."""

    model_config = ConfigDict(extra="forbid", title="ForkSpec")

    at: Point = None
    changes: Changes = Field(default_factory=list)


class SweepSpec(specs.SweepSpec):
    """A sweep: one fork per named variant, from the same run at the same point."""

    model_config = ConfigDict(extra="forbid", title="SweepSpec")

    at: Point = None
    variants: Variants = Field(min_length=1, max_length=32)


class GraphRegistration(inputs.GraphRegistration):
    """The documented form of ``inputs.GraphRegistration``: the spec as a full GraphSpec.

    Validation takes ``spec`` as a plain object so a bad graph is reported by the engine's
    own validator (``invalid_graph`` naming the node and field), not as a body error.
    """

    model_config = ConfigDict(extra="forbid", title="GraphRegistration")

    spec: GraphSpec  # type: ignore[assignment]
