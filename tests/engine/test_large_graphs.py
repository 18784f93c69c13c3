"""A 10,000-node graph loads, validates, runs and forks (issue 11).

Graphs are built programmatically and run into a MemoryStore: every 100th node is an agent
on the scripted provider, the others call an in-process tool, so the test exercises the
engine at this size rather than the scripted model's text generation. No timing is asserted
— the point is that nothing is quadratic enough, or recursive enough, to fail at this size
(the old recursive cycle check overflowed Python's stack at ~1,000 nodes; node lookups,
join checks and node-id membership scanned the whole graph per node; every execution copied
its iteration's node list).

The chain is forked where the prefix is short: a fork's ``run.forked`` event still carries
the prefix state with every prior execution (linear fork storage is separate work of issue
11), which at N/2 of 10,000 nodes is tens of megabytes. The tails are 10,000 and 9,900 nodes
long, which is what this test is about: reuse at scale.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from forklab.engine import Environment, change, fork, parse_graph, run_recorded
from forklab.engine.canonical import canonical_equals
from forklab.engine.inputs import check_graph_document

N = 10_000
# slow on purpose (tens of seconds on an idle machine); the limit leaves room for a loaded one
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def _node(node: str, i: int, reads: list[str], agent: bool = False) -> dict[str, Any]:
    if i % 100 and not agent:
        return {"id": node, "kind": "tool", "tool": "big.step", "reads": reads,
                "writes": [node], "params": {"i": i}}
    return {"id": node, "kind": "agent", "reads": reads, "writes": [node],
            "prompt": "{" + reads[0] + "}", "agent": {"system_prompt": f"you are {node}"}}


def _env() -> Environment:
    env = Environment()
    env.tools.register("big.step", lambda args, ctx: f"step {args['i']}")  # ignores its read
    return env


def chain(n: int) -> dict[str, Any]:
    names = [f"s{i}" for i in range(n)]
    nodes = [_node(name, i, ["task" if i == 0 else names[i - 1]], agent=i == n - 1)
             for i, name in enumerate(names)]
    edges = [{"from": a, "to": b} for a, b in pairwise(names)]
    return {"id": "chain10k", "start": names[0], "nodes": nodes, "edges": edges}


def fanout(n: int) -> dict[str, Any]:
    workers = [f"w{i}" for i in range(n)]
    nodes = [{**_node("dispatch", 1, ["task"]), "writes": ["brief"]},
             *(_node(w, i, ["task"]) for i, w in enumerate(workers)),
             {**_node("join", 0, ["task"]), "join": "all"}]
    edges = [*({"from": "dispatch", "to": w} for w in workers),
             *({"from": w, "to": "join"} for w in workers)]
    return {"id": "fanout10k", "start": "dispatch", "nodes": nodes, "edges": edges}


def test_a_10000_node_chain_validates_records_and_forks() -> None:
    data = chain(N)
    check_graph_document(data)  # within the stated size limits
    graph = parse_graph(data)
    base = run_recorded(graph, {"task": "t"}, env=_env())
    assert base.state.status == "completed"
    assert len(base.state.executions) == N

    null = fork(base, at="start", policy={"memoize": True}, budget={"max_live_calls": 0})
    assert len(null.calls) == N and {c["label"] for c in null.calls} == {"reused"}
    assert len(null.memo_hits) == N
    assert canonical_equals(null.state.memory, base.state.memory)

    # s100 is an agent: its answer changes, s101 (a tool) runs again on it and writes what it
    # wrote before, so from s102 on every node's inputs match the recording again
    early = fork(base, at={"before_node": "s100"}, change=change.prompt("s100", "other"),
                 policy={"memoize": True}, ignore_budget=True)  # estimated: all 9,900 live
    live = [(c["node"], c["label"]) for c in early.calls if c["label"] != "reused"]
    assert live == [("s100", "changed"), ("s101", "changed")]
    assert len(early.memo_hits) == N - 102
    assert early.state.memory["s100"] != base.state.memory["s100"]
    assert early.state.memory[f"s{N - 1}"] == base.state.memory[f"s{N - 1}"]


def test_a_10000_worker_fan_out_records_and_forks_one_worker() -> None:
    graph = parse_graph(fanout(N))
    base = run_recorded(graph, {"task": "t"}, env=_env())
    assert base.state.status == "completed"
    assert len(base.state.executions) == N + 2

    result = fork(base, at={"before_node": "w0"}, change=change.prompt("w0", "other"),
                  policy={"memoize": True}, budget={"max_live_calls": 10})
    live = [(c["node"], c["label"]) for c in result.calls if c["label"] != "reused"]
    assert live == [("w0", "changed")]  # the join reads only the task: served too
    assert result.state.status == "completed"
    assert result.state.memory["w0"] != base.state.memory["w0"]
    assert canonical_equals({k: v for k, v in result.state.memory.items() if k != "w0"},
                            {k: v for k, v in base.state.memory.items() if k != "w0"})
