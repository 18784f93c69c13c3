"""The workloads on forklab: ``run_recorded`` into a ``SqliteStore``, forks with ``fork``.

- Agent nodes drive the fake model through a provider registered in the ``Environment``
  (``env.providers.register``); ``dispatch`` is a tool node (no model call).
- A fork is ``fork(run_id, store=SqliteStore(path), at={"before_node": …}, change=…,
  policy={"memoize": True})`` from the store on disk: the prefix is replayed from the log,
  the tail runs through the planner; with ``memoize`` a tail node whose fingerprint matches
  the base's is served its recorded output (no call). Budgets are lifted
  (``ignore_budget``): the benchmark measures, it does not refuse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.peers import workloads as w
from bench.peers.model import INPUT_TOKENS, MODEL, OUTPUT_TOKENS, FakeModel
from bench.peers.outcome import Outcome, load_meta, save_meta, timed
from forklab.engine import Environment, GraphSpec, change, fork, parse_graph, run_recorded
from forklab.engine.providers import ChatRequest, ChatResponse
from forklab.engine.sqlite_store import SqliteStore

STORE = "forklab.sqlite3"
PROVIDER = "fake"
DISPATCH_TOOL = "bench.dispatch"
NO_BUDGET = {"max_live_calls": None, "max_cost_usd": None}


class FakeProvider:
    """A forklab provider over the shared fake model."""

    name = PROVIDER

    def __init__(self, model: FakeModel) -> None:
        self.model = model

    def complete(self, request: ChatRequest) -> ChatResponse:
        user = "\n".join(str(m["content"]) for m in request.messages)
        text = self.model.complete(request.system_prompt, user)
        return ChatResponse(text=text, input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS,
                            latency_ms=self.model.latency_s * 1000)


def dispatch(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """The fan-out's start: no model call, it hands the task to the workers."""
    return {"brief": args["task"]}


def environment(model: FakeModel) -> Environment:
    env = Environment()
    env.providers.register(FakeProvider(model))
    env.tools.register(DISPATCH_TOOL, dispatch)
    return env


def agent(node: str, system_prompt: str, reads: list[str], writes: str) -> dict[str, Any]:
    prompt = "\n".join("{" + key + "}" for key in reads)
    return {"id": node, "kind": "agent", "reads": reads, "writes": [writes], "prompt": prompt,
            "agent": {"provider": PROVIDER, "model": MODEL, "system_prompt": system_prompt}}


def chain_graph(n: int) -> GraphSpec:
    nodes = [agent(w.chain_node(i), w.step_prompt(i),
                   ["task" if i == 0 else w.chain_node(i - 1)], w.chain_node(i))
             for i in range(n)]
    edges = [{"from": w.chain_node(i - 1), "to": w.chain_node(i)} for i in range(1, n)]
    return parse_graph({"id": f"peers-chain-{n}", "start": w.chain_node(0), "nodes": nodes,
                        "edges": edges})


def fanout_graph(n: int) -> GraphSpec:
    workers = [w.worker_node(i) for i in range(n)]
    nodes: list[dict[str, Any]] = [
        {"id": "dispatch", "kind": "tool", "tool": DISPATCH_TOOL, "reads": ["task"],
         "writes": ["brief"]},
        *(agent(node, w.worker_prompt(i), ["brief"], node) for i, node in enumerate(workers)),
        {**agent("join", w.JOIN_PROMPT, workers, "summary"), "join": "all"},
    ]
    edges = [*({"from": "dispatch", "to": node} for node in workers),
             *({"from": node, "to": "join"} for node in workers)]
    return parse_graph({"id": f"peers-fanout-{n}", "start": "dispatch", "nodes": nodes,
                        "edges": edges})


def final_key(shape: str, n: int) -> str:
    return w.chain_node(n - 1) if shape == "chain" else "summary"


def record(shape: str, n: int, latency_ms: float, directory: Path) -> Outcome:
    """Build the graph, record one run into a fresh SQLite store (timed as a whole)."""
    model = FakeModel(latency_ms)

    def go() -> Any:
        graph = chain_graph(n) if shape == "chain" else fanout_graph(n)
        store = SqliteStore(directory / STORE)
        recorded = run_recorded(graph, {"task": w.TASK}, store=store, env=environment(model))
        store.close()
        return recorded

    seconds, recorded = timed(go)
    _check_completed(recorded.state)
    final = str(recorded.state.memory[final_key(shape, n)])
    save_meta(directory, run_id=recorded.run_id, final=final)
    return Outcome(seconds=seconds, calls=model.calls, final=final)


FORKS: dict[str, Any] = {
    "null": lambda n: ({"before_node": w.chain_node(n // 2)}, None),
    "last": lambda n: ({"before_node": w.chain_node(n - 1)},
                       change.prompt(w.chain_node(n - 1), w.CHANGED_LAST_PROMPT)),
    "worker0": lambda n: ({"before_node": w.worker_node(0)},
                          change.prompt(w.worker_node(0), w.CHANGED_WORKER_PROMPT)),
}


def fork_run(kind: str, n: int, latency_ms: float, directory: Path) -> Outcome:
    """Open the recorded store, fork it (prefix replayed, tail live, memoized)."""
    model = FakeModel(latency_ms)
    run_id = load_meta(directory)["run_id"]
    at, changed = FORKS[kind](n)

    def go() -> Any:
        store = SqliteStore(directory / STORE)
        result = fork(run_id, store=store, env=environment(model), at=at, change=changed,
                      policy={"memoize": True}, budget=NO_BUDGET, ignore_budget=True)
        store.close()
        return result

    seconds, result = timed(go)
    _check_completed(result.state)
    shape = "fanout" if kind == "worker0" else "chain"
    return Outcome(seconds=seconds, calls=model.calls,
                   final=str(result.state.memory[final_key(shape, n)]))


def _check_completed(state: Any) -> None:
    if state.status != "completed":
        raise RuntimeError(f"forklab run ended {state.status}: {state.error}")
