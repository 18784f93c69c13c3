"""Invariants over generated tool loops (SPEC §6.2-6.3), on the scripted provider with tools.

Generated: one to three read tools with generated JSON Schema parameters (string ids,
numbers, free text), a write tool, parallel calls on or off, a turn limit, a prompt holding
what the arguments are filled from, and sometimes a second node continuing the conversation
through ``history``. The scripted provider asks for the tools it can fill from the
conversation and answers from their results, so every run is a real loop.

1. A null fork at every point — every node, every turn, every tool call — makes no model or
   tool call and reproduces the run.
2. Memoize on and off give the same outcome, at any point.
3. A fork at a turn pays only the calls from that turn on (with memoize off): none of the
   calls recorded before the point is made again.
"""

from __future__ import annotations

import threading
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points
from forklab.engine.canonical import canonical_equals
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.graph import GraphSpec, parse_graph
from forklab.engine.providers import ChatRequest, ChatResponse, ProviderRegistry, ScriptedProvider
from forklab.engine.recording import RecordedRun, run_recorded
from tests.engine.properties.profiles import examples

TOOL_PATH = "tests.engine.properties.test_tool_loops.generated_tool"


class Counting:
    """The scripted provider and the generated tools, counting what really executes."""

    name = "scripted"

    def __init__(self) -> None:
        self.inner = ScriptedProvider()
        self.lock = threading.Lock()
        self.model = 0
        self.tools = 0

    def complete(self, request: ChatRequest) -> ChatResponse:
        with self.lock:
            self.model += 1
        return self.inner.complete(request)

    def tool(self, args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        with self.lock:
            self.tools += 1
        return generated_tool(args, ctx)


def generated_tool(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A deterministic answer derived from the arguments (their sorted items)."""
    return {"echo": {k: args[k] for k in sorted(args)}, "node": ctx.node, "ok": True}


PARAMS = {
    "order_id": {"type": "string"},
    "customer_id": {"type": "string"},
    "amount": {"type": "number"},
    "query": {"type": "string"},
}


@st.composite
def loop_graphs(draw: st.DrawFn) -> tuple[GraphSpec, dict[str, Any]]:
    names = draw(st.lists(st.sampled_from(["lookup", "search", "fetch"]), min_size=1,
                          max_size=3, unique=True))
    tools: dict[str, Any] = {}
    for name in names:
        params = draw(st.lists(st.sampled_from(sorted(PARAMS)), min_size=1, max_size=2,
                               unique=True))
        tools[name] = {"fn": TOOL_PATH, "description": f"The {name} tool.", "parameters": {
            "type": "object", "properties": {p: PARAMS[p] for p in params},
            "required": params[:1]}}
    writes = draw(st.booleans())
    if writes:
        tools["act"] = {"fn": TOOL_PATH, "effect": "write", "parameters": {
            "type": "object", "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"]}}
    agent = {"model": "scripted-small", "system_prompt": "Help the customer with {topic}.",
             "tools": sorted(tools), "max_turns": draw(st.integers(2, 6)),
             "parallel_tool_calls": draw(st.sampled_from([None, True, False]))}
    nodes: list[dict[str, Any]] = [
        {"id": "assist", "kind": "agent", "agent": "helper",
         "reads": ["ticket", "topic", "talk"], "writes": ["answer", "talk"],
         "history": "talk", "prompt": "{ticket}"}]
    edges = []
    if draw(st.booleans()):
        nodes.append({"id": "close", "kind": "agent", "agent": "closer", "reads": ["talk"],
                      "writes": ["closing", "talk"], "history": "talk",
                      "prompt": "Close it."})
        edges.append({"from": "assist", "to": "close"})
    graph = parse_graph({
        "id": "loop", "start": "assist", "tools": tools, "nodes": nodes, "edges": edges,
        "agents": {"helper": agent,
                   "closer": {"model": "scripted-mini", "system_prompt": "Be kind."}}})
    order = draw(st.sampled_from(["A-1001", "B-22", "#4711"]))
    amount = draw(st.sampled_from(["12.5", "3", "99.99"]))
    ticket = f"order_id: {order} customer_id: C-{amount} amount: {amount} please check"
    return graph, {"ticket": ticket, "topic": draw(st.sampled_from(["refunds", "shipping"]))}


def record(graph: GraphSpec, input: dict[str, Any]) -> tuple[RecordedRun, Counting]:
    counting = Counting()
    env = Environment(clock=FixedClock(), ids=counter_ids("run"),
                      providers=ProviderRegistry({"scripted": counting}))
    env.tools.register(TOOL_PATH, counting.tool)
    base = run_recorded(graph, dict(input), env=env)
    return base, counting


@examples(25)
@given(case=loop_graphs())
def test_a_null_fork_at_every_turn_and_tool_call_makes_no_call_and_reproduces(
        case: Any) -> None:
    base, counting = record(*case)
    made = (counting.model, counting.tools)
    for point in fork_points(base.event_log):
        same = fork(base, at=point.address(), policy={"memoize": True})
        assert same.state.status == base.state.status, point.label
        assert canonical_equals(same.state.memory, base.state.memory), point.label
    assert (counting.model, counting.tools) == made


@examples(25)
@given(case=loop_graphs(), data=st.data())
def test_memoize_on_and_off_give_the_same_outcome_at_any_point(
        case: Any, data: st.DataObject) -> None:
    base, _ = record(*case)
    point = data.draw(st.sampled_from(fork_points(base.event_log)), label="point")
    on = fork(base, at=point.address(), policy={"memoize": True})
    off = fork(base, at=point.address(), policy={"memoize": False})
    assert on.state.status == off.state.status, point.label
    assert canonical_equals(on.state.memory, off.state.memory), point.label


@examples(25)
@given(case=loop_graphs(), data=st.data())
def test_a_fork_at_a_call_pays_only_the_calls_from_it_on(case: Any, data: st.DataObject) -> None:
    base, counting = record(*case)
    calls = [p for p in fork_points(base.event_log) if p.call is not None]
    if not calls:
        return  # the model asked for no tool: a one-turn node has no call points
    point = data.draw(st.sampled_from(calls), label="point")
    made = (counting.model, counting.tools)
    result = fork(base, at=point.address(), policy={"memoize": False})
    keys = [c.call for c in base.state.calls]
    before = keys[:keys.index(point.call)]
    relabelled = {c["call"]: c["label"] for c in result.calls}
    assert all(relabelled.get(k) == "reused" for k in before if k in relabelled), point.label
    paid = (counting.model - made[0]) + (counting.tools - made[1])
    after = len(keys) - len(before)
    assert paid <= after, f"{point.label}: paid {paid} calls, {after} come from it on"
