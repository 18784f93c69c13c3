"""A support agent's world for the tool-loop tests: a graph, and a model that follows the talk.

:class:`FollowingModel` is a provider whose reply is computed from what it is sent — the
tools offered, the user's message, the tool results so far — the way a real model's is (the
idea of pydantic-ai's ``FunctionModel``), so a changed tool result or prompt changes what it
does next. It counts every request it really answers, so a test can say "no model call
happened" without trusting the labels a fork wrote.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.graph import GraphSpec, parse_graph
from forklab.engine.providers import (
    ChatRequest,
    ChatResponse,
    ProviderRegistry,
    ToolCallRequest,
    estimate_tokens,
)
from forklab.engine.scenarios import tools as demo_tools

ORDER_ID = re.compile(r"\b[A-Z]-\d{3,}\b")


def tool_results(request: ChatRequest) -> list[tuple[str, Any]]:
    """(tool name, decoded result) of every tool message so far, in order."""
    found = []
    for message in request.messages:
        if message.get("role") == "tool":
            try:
                content = json.loads(message["content"])
            except ValueError:
                content = message["content"]
            found.append((message.get("name", ""), content))
    return found


class FollowingModel:
    """Looks an order up, refunds it when the user asks for a refund and the lookup shows an
    amount, then answers from the results. ``parallel``: asks for the lookup and the policy
    search in one turn. ``script``: replace the policy with a function of the request."""

    name = "scripted"

    def __init__(self, *, parallel: bool = False, script: Any = None) -> None:
        self.requests: list[ChatRequest] = []
        self._lock = threading.Lock()
        self.parallel = parallel
        self.script = script

    def complete(self, request: ChatRequest) -> ChatResponse:
        with self._lock:
            self.requests.append(request)
            n = len(self.requests)
        text, calls = (self.script or self._policy)(request)
        tool_calls = tuple(ToolCallRequest(id=f"call_{n}_{i}", name=name, arguments=args)
                           for i, (name, args) in enumerate(calls, start=1))
        prompt = request.system_prompt + "".join(str(m.get("content")) for m in request.messages)
        return ChatResponse(text=text, input_tokens=estimate_tokens(prompt),
                            output_tokens=estimate_tokens(text) + 8 * len(tool_calls),
                            tool_calls=tool_calls,
                            finish_reason="tool_calls" if tool_calls else "stop")

    def _policy(self, request: ChatRequest) -> tuple[str, list[tuple[str, Any]]]:
        offered = {t.name for t in request.tools}
        user = next((m["content"] for m in reversed(request.messages) if m["role"] == "user"),
                    "")
        results = dict(tool_results(request))
        order = ORDER_ID.search(user)
        if "lookup_order" in offered and "lookup_order" not in results and order:
            calls = [("lookup_order", {"order_id": order.group()})]
            if self.parallel and "search_policy" in offered:
                calls.append(("search_policy", {"topic": "refund"}))
            return "", calls
        looked = results.get("lookup_order")
        if ("issue_refund" in offered and "issue_refund" not in results
                and "refund" in user.lower() and isinstance(looked, dict)
                and looked.get("found")):
            return "", [("issue_refund", {"order_id": looked["order_id"],
                                          "amount": looked["amount"]})]
        refund = results.get("issue_refund")
        if isinstance(refund, dict) and "refund_id" in refund:
            return (f"Refunded {refund['amount']} for {refund['order_id']} "
                    f"(refund {refund['refund_id']}). Tone: {request.system_prompt}"), []
        if isinstance(looked, dict):
            return f"Order {looked.get('order_id')} is {looked.get('status', 'unknown')}.", []
        return f"Answer to: {user}", []


SUPPORT = {
    "id": "support",
    "start": "assist",
    "tools": {
        "lookup_order": {"fn": "forklab.engine.scenarios.tools.lookup_order"},
        "issue_refund": {"fn": "forklab.engine.scenarios.tools.issue_refund",
                         "effect": "write"},
        "search_policy": {"fn": "forklab.engine.scenarios.tools.search_policy"},
    },
    "agents": {
        "support": {"model": "scripted-small",
                    "system_prompt": "You are the support agent for {product}.",
                    "tools": ["lookup_order", "issue_refund", "search_policy"]},
        "closer": {"model": "scripted-small", "system_prompt": "Close the ticket politely."},
    },
    "nodes": [
        {"id": "assist", "kind": "agent", "agent": "support",
         "reads": ["ticket", "product", "conversation"],
         "writes": ["answer", "conversation"], "history": "conversation",
         "prompt": "{ticket}"},
        {"id": "close", "kind": "agent", "agent": "closer", "reads": ["conversation"],
         "writes": ["closing", "conversation"], "history": "conversation",
         "prompt": "Write the closing line."},
    ],
    "edges": [{"from": "assist", "to": "close"}],
}

TICKET = {"ticket": "My order A-1001 arrived damaged, please refund it.",
          "product": "Acme Widgets"}


def support_graph(**agent_fields: Any) -> GraphSpec:
    data = json.loads(json.dumps(SUPPORT))
    data["agents"]["support"].update(agent_fields)
    return parse_graph(data)


def env_with(model: FollowingModel) -> Environment:
    return Environment(clock=FixedClock(), ids=counter_ids("run"),
                       providers=ProviderRegistry({"scripted": model}))


def refunds() -> int:
    return demo_tools.WORLD.count("refund")


def summarize_order(order_id: str, ctx: Any) -> dict[str, Any]:
    """Summarize an order for the customer (asks a model itself, twice)."""
    order = demo_tools.lookup_order(order_id)
    first = ctx.ask({"model": "scripted-small", "system_prompt": "Summarize."},
                    f"Order facts: {json.dumps(order, sort_keys=True)}")
    second = ctx.ask("closer", f"Polish: {first}")
    return {"order_id": order_id, "summary": second}


def asking_graph() -> GraphSpec:
    """The support agent with one tool that asks a model from inside (``ctx.ask``)."""
    data = json.loads(json.dumps(SUPPORT))
    data["tools"] = {"summarize_order": {"fn": "tests.engine.agents.helpers.summarize_order"}}
    data["agents"]["support"]["tools"] = ["summarize_order"]
    return parse_graph(data)


def asking_env(model: FollowingModel) -> Environment:
    env = env_with(model)
    env.tools.register("tests.engine.agents.helpers.summarize_order", summarize_order)
    return env
