"""Request specs: the JSON bodies of fork, sweep, answer, case and run requests (SPEC §4.3).

The fork and sweep bodies, their policy and budget are the engine's wire models
(:mod:`forklab.engine.fork.wire`), re-exported here for the use cases, the REST API (which
documents them in the OpenAPI schema), the dashboard's forms and the CLI. The other bodies
are run-layer pydantic models (a case's criteria are the engine's ``Condition``). ``parse`` turns any validation failure into one
``invalid_request`` error naming the field (a bad change is the engine's ``invalid_change``).
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from forklab.engine.fork.changes import check_limits
from forklab.engine.fork.wire import (
    AllowList,
    Budget,
    ForkSpec,
    InvalidRequest,
    Policy,
    SweepSpec,
    parse_request,
)
from forklab.engine.graph import Condition

__all__ = ["AllowList", "AnswerSpec", "Budget", "CaseSpec", "ForkSpec", "InvalidRequest",
           "Policy", "RunSpec", "SweepSpec", "parse"]


class _Spec(BaseModel):
    # allow_inf_nan off: a form's "nan" or "inf" in a number field is refused, not parsed
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class AnswerSpec(_Spec):
    """An approval gate's answer. Its data and memory updates are held to a change spec's
    limits (the same answer given as a ``human_response`` change is one): a redaction
    placeholder copied from a page (``[REDACTED]``) is refused, ``invalid_overrides``,
    rather than stored as if it were the value."""

    decision: Literal["approved", "rejected", "edited"]
    data: Any = None
    memory_updates: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _within_limits(self) -> Self:
        check_limits({"data": self.data, "memory_updates": self.memory_updates}, "an answer")
        return self


class CaseSpec(_Spec):
    """``POST /forks/{id}/save-case/``: the case's name and its pass criteria, each the
    engine's :class:`~forklab.engine.graph.Condition` over final memory (validated here, once:
    a bad one is ``invalid_request`` naming ``criteria.<i>.<field>``)."""

    name: str = Field(min_length=1, max_length=200)
    criteria: list[Condition] = Field(default_factory=list)


class RunSpec(_Spec):
    """``POST /runs/``: a run of a registered graph (``graph``) or of a code-first workflow
    (``workflow``, ``module:function`` under ``FORKLAB_WORKFLOW_MODULES``) — one of them."""

    graph: str | None = Field(default=None, min_length=1, max_length=100)
    workflow: str | None = Field(default=None, min_length=1, max_length=300)
    input: dict[str, Any] = Field(default_factory=dict)
    label: str = Field(default="", max_length=200)
    project: str | None = None
    graph_version: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.graph is None) == (self.workflow is None):
            raise ValueError("give either 'graph' (a registered graph id) or 'workflow' "
                             "(module:function of a code-first workflow), not both or neither")
        if self.workflow is not None and self.graph_version is not None:
            raise ValueError("'graph_version' is for a registered graph; a workflow's graph "
                             "is the one its code declares now")
        return self


def parse[S: BaseModel](spec: type[S], data: Any) -> S:
    """Validate a request body (see :func:`forklab.engine.fork.wire.parse_request`)."""
    return parse_request(spec, data)
