"""The workloads on LangGraph 1.2: a ``StateGraph`` checkpointed by ``SqliteSaver``.

- State: ``task`` and ``results`` (a dict merged by a reducer); node ``n{i}`` reads
  ``results[n{i-1}]`` (``n0`` reads ``task``) and writes ``results[n{i}]``. Fan-out: static
  edges ``dispatch → w{i}`` run every worker in one super-step (LangGraph runs a step's
  tasks concurrently on its thread pool, default size), and ``add_edge([w…], "join")``
  waits for all of them.
- With ``cache=True`` every node has a ``CachePolicy`` whose key is its system prompt plus
  the state it reads (the default key pickles the whole input state, which grows with the
  chain), and the graph is compiled with a ``SqliteCache`` file next to the checkpoints, so
  a fork in a new process finds what the recording cached.
- A fork is LangGraph's time travel: rebuild the graph (with the changed prompt, if any),
  walk ``get_state_history`` to the checkpoint whose ``next`` is the node to re-run, and
  ``invoke(None, checkpoint_config)``. The checkpoints before it are reused; every node
  after it executes again (served from the cache when one is configured and the key
  matches); the new checkpoints form a branch of the same thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.cache.sqlite import SqliteCache
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import CachePolicy

from bench.peers import workloads as w
from bench.peers.model import FakeModel
from bench.peers.outcome import Outcome, save_meta, timed

STORE = "langgraph.sqlite3"
CACHE = "langgraph-cache.sqlite3"
THREAD = "base"


def merge(left: dict[str, str], right: dict[str, str]) -> dict[str, str]:
    return {**left, **right}


class State(TypedDict):
    task: str
    results: Annotated[dict[str, str], merge]


Reader = Callable[[State], str]


def _add_agent(builder: StateGraph, node: str, system: str, read: Reader, model: FakeModel,
               cache: bool) -> None:
    def run(state: State) -> dict[str, Any]:
        return {"results": {node: model.complete(system, read(state))}}

    def key(state: State) -> str:
        return f"{system}\x00{read(state)}"

    builder.add_node(node, run, cache_policy=CachePolicy(key_func=key) if cache else None)


def chain_builder(n: int, model: FakeModel, cache: bool, last_prompt: str | None = None
                  ) -> StateGraph:
    builder = StateGraph(State)
    for i in range(n):
        prompt = last_prompt if (last_prompt and i == n - 1) else w.step_prompt(i)
        prev = w.chain_node(i - 1)
        read: Reader = (lambda s: s["task"]) if i == 0 else (lambda s, p=prev: s["results"][p])
        _add_agent(builder, w.chain_node(i), prompt, read, model, cache)
    builder.add_edge(START, w.chain_node(0))
    for i in range(1, n):
        builder.add_edge(w.chain_node(i - 1), w.chain_node(i))
    builder.add_edge(w.chain_node(n - 1), END)
    return builder


def fanout_builder(n: int, model: FakeModel, cache: bool, worker0_prompt: str | None = None
                   ) -> StateGraph:
    builder = StateGraph(State)
    workers = [w.worker_node(i) for i in range(n)]
    builder.add_node("dispatch", lambda state: {})
    for i, node in enumerate(workers):
        prompt = worker0_prompt if (worker0_prompt and i == 0) else w.worker_prompt(i)
        _add_agent(builder, node, prompt, lambda s: s["task"], model, cache)
    _add_agent(builder, "join", w.JOIN_PROMPT,
               lambda s: "\n".join(s["results"][node] for node in workers), model, cache)
    builder.add_edge(START, "dispatch")
    for node in workers:
        builder.add_edge("dispatch", node)
    builder.add_edge(workers, "join")
    builder.add_edge("join", END)
    return builder


def final_text(values: dict[str, Any], shape: str, n: int) -> str:
    return str(values["results"][w.chain_node(n - 1) if shape == "chain" else "join"])


class Session:
    """A saver connection, the optional cache and the compiled graph over one directory."""

    def __init__(self, directory: Path, builder: StateGraph, cache: bool, n: int) -> None:
        self.conn = sqlite3.connect(directory / STORE, check_same_thread=False)
        self.cache = SqliteCache(path=str(directory / CACHE)) if cache else None
        self.graph = builder.compile(checkpointer=SqliteSaver(self.conn), cache=self.cache)
        self.limit = n + 10  # one super-step per chained node

    def config(self, **configurable: Any) -> dict[str, Any]:
        return {"configurable": {"thread_id": THREAD, **configurable},
                "recursion_limit": self.limit}

    def close(self) -> None:
        self.conn.close()  # SqliteCache has no close(); the harness checkpoints its WAL


def record(shape: str, n: int, latency_ms: float, directory: Path, *, cache: bool) -> Outcome:
    """Compile the graph with a fresh saver (and cache), invoke it on one thread."""
    model = FakeModel(latency_ms)

    def go() -> dict[str, Any]:
        build = chain_builder if shape == "chain" else fanout_builder
        session = Session(directory, build(n, model, cache), cache, n)
        values: dict[str, Any] = session.graph.invoke({"task": w.TASK, "results": {}},
                                                      session.config())
        session.close()
        return values

    seconds, values = timed(go)
    final = final_text(values, shape, n)
    save_meta(directory, run_id=THREAD, final=final)
    return Outcome(seconds=seconds, calls=model.calls, final=final)


def _builder(kind: str, n: int, model: FakeModel, cache: bool) -> tuple[StateGraph, str]:
    """The (changed) graph of a fork and the node whose pending checkpoint it resumes."""
    if kind == "worker0":
        return fanout_builder(n, model, cache, w.CHANGED_WORKER_PROMPT), w.worker_node(0)
    if kind == "null":
        return chain_builder(n, model, cache), w.chain_node(n // 2)
    return chain_builder(n, model, cache, w.CHANGED_LAST_PROMPT), w.chain_node(n - 1)


def fork_run(kind: str, n: int, latency_ms: float, directory: Path, *, cache: bool) -> Outcome:
    """Time travel: find the checkpoint before the node, invoke from it with the new graph."""
    model = FakeModel(latency_ms)

    def go() -> dict[str, Any]:
        builder, node = _builder(kind, n, model, cache)
        session = Session(directory, builder, cache, n)
        point = next(s for s in session.graph.get_state_history(session.config())
                     if node in s.next)
        values: dict[str, Any] = session.graph.invoke(
            None, session.config(checkpoint_id=point.config["configurable"]["checkpoint_id"]))
        session.close()
        return values

    seconds, values = timed(go)
    return Outcome(seconds=seconds, calls=model.calls,
                   final=final_text(values, "fanout" if kind == "worker0" else "chain", n))
