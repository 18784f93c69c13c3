"""Request specs: the JSON bodies of fork, sweep, answer and case requests (SPEC §4.3).

Pydantic models shared by the REST API (which documents them in the OpenAPI schema), the
dashboard's composer and the CLI. ``parse`` turns any validation failure into one
``invalid_request`` error naming the field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forklab.engine.errors import ForklabError
from forklab.engine.inputs import check_json_value

_ID = r"^[A-Za-z0-9_\-]{1,64}$"


class InvalidRequest(ForklabError):
    code = "invalid_request"


class _Spec(BaseModel):
    # allow_inf_nan off: a form's "nan" or "inf" in a number field is refused, not parsed
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class AllowSpec(_Spec):
    allow: list[str] | Literal[True]


class PolicySpec(_Spec):
    side_effects: Literal["replay", "block"] | AllowSpec = "replay"
    memoize: bool = False

    def wire(self) -> dict[str, Any]:
        side = self.side_effects
        return {"side_effects": side if isinstance(side, str) else side.model_dump(),
                "memoize": self.memoize}


class BudgetSpec(_Spec):
    max_live_calls: int | None = Field(default=50, ge=0, le=100_000)
    max_cost_usd: float | None = Field(default=1.00, ge=0)

    def wire(self) -> dict[str, Any]:
        return {"max_live_calls": self.max_live_calls, "max_cost_usd": self.max_cost_usd}

    def explicit(self) -> dict[str, Any]:
        """Only what the caller set (``max_cost_usd: null`` = clear the cost budget)."""
        return self.model_dump(exclude_unset=True)


class ForkSpec(_Spec):
    base_run: str = Field(pattern=_ID)
    at: str | dict[str, Any] | None = None
    changes: list[dict[str, Any]] = Field(default_factory=list)
    policy: PolicySpec = Field(default_factory=PolicySpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    label: str = Field(default="", max_length=200)
    client_request_id: str | None = Field(default=None, max_length=200)
    ignore_budget: bool = False
    source: Literal["events", "snapshot", "auto"] = "events"
    graph_version: int | None = Field(default=None, ge=1)
    run_id: str | None = Field(default=None, pattern=_ID)


class SweepSpec(_Spec):
    base_run: str = Field(pattern=_ID)
    at: str | dict[str, Any] | None = None
    variants: dict[str, list[dict[str, Any]] | dict[str, Any]] = Field(min_length=1,
                                                                       max_length=32)
    policy: PolicySpec = Field(default_factory=PolicySpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    concurrency: int = Field(default=4, ge=1, le=16)
    ignore_budget: bool = False
    label: str = Field(default="", max_length=200)


class AnswerSpec(_Spec):
    decision: Literal["approved", "rejected", "edited"]
    data: Any = None
    memory_updates: dict[str, Any] = Field(default_factory=dict)


class CaseSpec(_Spec):
    name: str = Field(min_length=1, max_length=200)
    criteria: list[dict[str, Any]] = Field(default_factory=list)


class RunSpec(_Spec):
    graph: str = Field(min_length=1, max_length=100)
    input: dict[str, Any] = Field(default_factory=dict)
    label: str = Field(default="", max_length=200)
    project: str | None = None
    graph_version: int | None = Field(default=None, ge=1)


def parse[S: BaseModel](spec: type[S], data: Any) -> S:
    """Validate a request body: values no store can keep are ``invalid_input`` naming their
    path; any other problem is one ``invalid_request`` naming the field."""
    if not isinstance(data, dict):
        raise InvalidRequest(f"the request body must be a JSON object, got "
                             f"{type(data).__name__}")
    check_json_value(data, where="body")  # invalid_input: what no store can keep
    try:
        return spec.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        field = ".".join(str(p) for p in first["loc"]) or "(body)"
        raise InvalidRequest(
            f"field '{field}': {first['msg']}",
            field=field, errors=[{"field": ".".join(str(p) for p in e["loc"]), "msg": e["msg"]}
                                 for e in errors[:10]],
        ) from None
