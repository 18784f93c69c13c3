"""``GET /runs/{id}/conversation/?node=&occurrence=``: an agent execution as a thread
(SPEC §6.5) — each model turn under its call key with the messages it was sent (``earlier``:
the history before the last assistant message; ``new``: what this turn added), the reply,
the tool calls with arguments and results or errors, tokens, cost and provenance label."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from pydantic import BaseModel
from rest_framework import serializers as s
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from forklab.api.inputs import Query
from forklab.api.schema import READ, path_id, responses
from forklab.runs import conversations, queries
from forklab.runs.errors import NotFound


class ConversationQuery(Query):
    node = s.CharField(max_length=200, help_text="the agent node's id")
    occurrence = s.IntegerField(required=False, min_value=1, max_value=1_000_000, default=1,
                                help_text="which execution of the node (1 = the first)")


class ToolUseWire(BaseModel):
    key: str
    call: str
    tool: str
    call_id: str | None
    effect: str
    arguments: Any
    result: Any
    error: dict[str, Any] | None
    label: str
    seq: int
    done: bool
    asks: list[dict[str, Any]]  # models the tool asked (``…/tool:1/ask:1``), turn-shaped
    approval: dict[str, Any] | None  # a gated tool's decision, answered_by, label
    replayable: bool | None  # an imported run's call: null for a run not imported
    missing: list[str]  # an inspect-only call: what was not captured
    capture_hint: str | None  # an inspect-only call: the setting that captures it


class TurnWire(BaseModel):
    key: str
    call: str
    seq: int
    model: str
    earlier: list[dict[str, Any]]
    new: list[dict[str, Any]]
    text: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    latency_ms: float
    label: str
    error: dict[str, Any] | None
    answered: bool
    tools: list[ToolUseWire]
    replayable: bool | None  # an imported run's call: null for a run not imported
    missing: list[str]  # an inspect-only call: what was not captured
    capture_hint: str | None  # an inspect-only call: the setting that captures it


class ConversationWire(BaseModel):
    """An agent execution's conversation thread."""

    run_id: str
    node: str
    occurrence: int
    inherited_from: str | None
    served: bool
    system_prompt: str
    turns: list[TurnWire]


@extend_schema(
    operation_id="runs_conversation",
    parameters=[path_id("run_id", "run id"), ConversationQuery],
    summary="An agent execution's conversation",
    description="The turns and tool calls of `node`'s execution `occurrence`, each under its "
                "call key (`assist#1/turn:2`, `assist#1/turn:2/tool:1`), the address of a "
                "`before_call` fork point and of the per-call changes `reply`, "
                "`tool_result` and `rerun`. An execution this run inherited is read from its "
                "base (`inherited_from`); a served one (`served`) lists no messages. A call "
                "of a run imported from a trace says whether it is `replayable` and, when "
                "not, what is `missing` and the `capture_hint` that captures it (null for "
                "other runs).",
    responses=responses({200: ConversationWire}, 400, *READ))
@api_view(["GET"])
def run_conversation(request: Request, run_id: str) -> Response:
    run = queries.get_run(run_id, user=request.user)
    query = ConversationQuery.read(request.query_params)
    thread = conversations.conversation(run, query["node"], query["occurrence"])
    if thread is None:
        raise NotFound(f"run {run.id!r} has no execution {query['occurrence']} of "
                       f"{query['node']!r} that called a model", node=query["node"],
                       occurrence=query["occurrence"])
    return Response(ConversationWire.model_validate(thread.to_wire()).model_dump(mode="json"))
