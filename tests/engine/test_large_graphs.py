"""A 10,000-node graph loads, validates, runs and forks (issue 11).

Graphs are built programmatically and run into a MemoryStore: every 100th node is an agent
on the scripted provider, the others call an in-process tool, so the test exercises the
engine at this size rather than the scripted model's text generation. No timing is asserted
— the point is that nothing is quadratic enough, or recursive enough, to fail at this size
(the old recursive cycle check overflowed Python's stack at ~1,000 nodes; node lookups,
join checks and node-id membership scanned the whole graph per node).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from forklab.engine import Environment, change, fork, parse_graph, run_recorded
from forklab.engine.canonical import canonical_equals
from forklab.engine.inputs import check_graph_document

N = 10_000
pytestmark = pytest.mark.slow


def _node(node: str, i: int, reads: list[str], agent: bool = False) -> dict[str, Any]:
    if i % 100 and not agent:
        return {"id": node, "kind": "tool", "tool": "big.step", "reads": reads,
                "writes": [node], "params": {"i": i}}
    return {"id": node, "kind": "agent", "reads": reads, "writes": [node],
            "prompt": "{" + reads[0] + "}", "agent": {"system_prompt": f"you are {node}"}}


def _env() -> Environment:
    env = Environment()
    env.tools.register("big.step", lambda args, ctx: f"{args['i']}:{len(str(args))}")
    return env


def chain(n: int) -> dict[str, Any]:
    names = [f"s{i}" for i in range(n)]
    nodes = [_node(name, i, ["task" if i == 0 else names[i - 1]], agent=i == n - 1)
             for i, name in enumerate(names)]
    edges = [{"from": a, "to": b} for a, b in pairwise(names)]
    return {"id": "chain10k", "start": names[0], "nodes": nodes, "edges": edges}


def fanout(n: int) -> dict[str, Any]:
    workers = [f"w{i}" for i in range(n)]
    nodes = [{"id": "dispatch", "kind": "router", "reads": [], "default": "end",
              "rules": [{"when": [{"key": "$iteration", "op": "gte", "value": 99}],
                         "to": "end"}]},
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

    null = fork(base, at={"before_node": f"s{N // 2}"}, policy={"memoize": True})
    assert null.calls and {c["label"] for c in null.calls} == {"reused"}
    assert canonical_equals(null.state.memory, base.state.memory)

    last = fork(base, at={"before_node": f"s{N - 1}"},
                change=change.prompt(f"s{N - 1}", "say it differently"),
                policy={"memoize": True})
    assert [(c["node"], c["label"]) for c in last.calls] == [(f"s{N - 1}", "changed")]
    assert last.state.memory[f"s{N - 1}"] != base.state.memory[f"s{N - 1}"]


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
