"""The workloads on activegraph 1.12: LLM behaviors reacting to graph events, SQLite log.

- An agent node is an ``@llm_behavior``: its system prompt is the behavior's
  ``description``; the runtime assembles the user message from the triggering event and a
  scoped view (``around`` the triggering object, depth 0, no recent events, so a prompt
  stays O(1)). Chain node ``n{i}`` fires on the ``step`` object ``n{i-1}`` created (``n0``
  on ``goal.created``) and creates the next ``step``.
- Fan-out: the ``goal.created`` event is the dispatch — every worker fires on it and creates
  a ``result``; a plain behavior counts results and, at N, creates ``ready`` (once), which fires the
  ``join`` LLM behavior whose view holds every ``result``.
- The run is persisted with ``Runtime(graph, persist_to=path)`` (activegraph's SQLite event
  store, one committed row per event).
- A fork is ``Runtime.load(path, run_id, behaviors=…)`` then ``runtime.fork(at_event,
  behaviors=<changed>, replay_llm_cache=True)`` and ``run_until_idle()``: the fork copies
  the parent's events up to ``at_event`` into a new run, replays them into a graph,
  re-queues events whose behaviors never started, and serves any prompt whose hash the
  parent recorded from the parent's responses (the cache). "Before node k" is the
  ``behavior.completed`` event of ``n{k-1}``; "before worker 0" is ``goal.created``.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

from activegraph import Graph, Runtime, behavior, clear_registry, llm_behavior
from activegraph.llm.types import LLMMessage, LLMResponse

from bench.peers import workloads as w
from bench.peers.model import INPUT_TOKENS, MODEL, OUTPUT_TOKENS, FakeModel
from bench.peers.outcome import Outcome, load_meta, save_meta, timed

STORE = "activegraph.sqlite3"
ONE_OBJECT = {"around": "event.payload.object.id", "depth": 0, "recent_events": 0}
NO_OBJECTS = {"include_types": ["-"], "recent_events": 0}


class FakeProvider:
    """An activegraph ``LLMProvider`` over the shared fake model."""

    default_model = MODEL

    def __init__(self, model: FakeModel) -> None:
        self.model = model

    def complete(self, *, system: str, messages: list[LLMMessage], model: str,
                 **_: Any) -> LLMResponse:
        text = self.model.complete(system, "\n".join(m.content for m in messages))
        return LLMResponse(raw_text=text, parsed=text, input_tokens=INPUT_TOKENS,
                           output_tokens=OUTPUT_TOKENS, cost_usd=Decimal(0),
                           latency_seconds=self.model.latency_s, model=model,
                           finish_reason="end_turn")

    def estimate_cost(self, *, input_tokens: int, output_tokens: int, model: str) -> Decimal:
        return Decimal(0)

    def count_tokens(self, *, system: str, messages: list[LLMMessage], model: str) -> int:
        return INPUT_TOKENS

    def supports_native_structured_output(self, model: str) -> bool:
        return False

    def recognizes_model(self, name: str) -> bool:
        return name == MODEL


def _agent(name: str, description: str, on: str, where: dict[str, Any] | None,
           view: dict[str, Any], creates: str, data: dict[str, Any]) -> Any:
    def handler(event: Any, graph: Any, ctx: Any, llm_output: Any) -> None:
        graph.add_object(creates, {**data, "text": str(llm_output)})

    return llm_behavior(name=name, description=description, on=[on], where=where, view=view,
                        creates=[creates], model=MODEL, temperature=0.0,
                        max_tokens=256)(handler)


def chain_behaviors(n: int, last_prompt: str | None = None) -> list[Any]:
    behaviors = []
    for i in range(n):
        prompt = last_prompt if (last_prompt and i == n - 1) else w.step_prompt(i)
        if i == 0:
            b = _agent(w.chain_node(0), prompt, "goal.created", None, NO_OBJECTS, "step",
                       {"index": 0})
        else:
            where = {"object.type": "step", "object.data.index": i - 1}
            b = _agent(w.chain_node(i), prompt, "object.created", where, ONE_OBJECT, "step",
                       {"index": i})
        behaviors.append(b)
    clear_registry()  # explicit lists are passed to every runtime; keep the global one empty
    return behaviors


def fanout_behaviors(n: int, worker0_prompt: str | None = None) -> list[Any]:
    workers = [
        _agent(w.worker_node(i), (worker0_prompt if worker0_prompt and i == 0
                                  else w.worker_prompt(i)),
               "goal.created", None, NO_OBJECTS, "result", {"index": i})
        for i in range(n)
    ]

    def collect(event: Any, graph: Any, ctx: Any) -> None:
        # Results are queued before any of them is handled, so every collect invocation may
        # see all N: "ready" is created once, by the first that does.
        types = [o.type for o in ctx.view.objects()]
        if types.count("result") == n and "ready" not in types:
            graph.add_object("ready", {"count": n})

    collector = behavior(name="collect", on=["object.created"],
                         where={"object.type": "result"},
                         view={"include_types": ["result", "ready"], "recent_events": 0},
                         )(collect)
    join = _agent("join", w.JOIN_PROMPT, "object.created", {"object.type": "ready"},
                  {"include_types": ["result"], "recent_events": 0}, "summary", {})
    clear_registry()
    return [*workers, collector, join]


def final_text(graph: Graph, shape: str) -> str:
    kind = "step" if shape == "chain" else "summary"
    objects = graph.objects_in_types([kind])
    if shape == "chain":
        objects = sorted(objects, key=lambda o: o.data["index"])
    return str(objects[-1].data["text"])


def record(shape: str, n: int, latency_ms: float, directory: Path) -> Outcome:
    """Build the behaviors, run the goal on a runtime persisting to a fresh SQLite file."""
    model = FakeModel(latency_ms)

    def go() -> Runtime:
        behaviors = chain_behaviors(n) if shape == "chain" else fanout_behaviors(n)
        runtime = Runtime(Graph(), behaviors=behaviors, llm_provider=FakeProvider(model),
                          persist_to=str(directory / STORE))
        runtime.run_goal(w.TASK)
        return runtime

    seconds, runtime = timed(go)
    _check_clean(runtime)
    final = final_text(runtime.graph, shape)
    save_meta(directory, run_id=runtime.run_id, final=final)
    return Outcome(seconds=seconds, calls=model.calls, final=final)


def _fork_point(events: list[Any], kind: str, n: int) -> str:
    if kind == "worker0":
        return next(e.id for e in events if e.type == "goal.created")
    before = w.chain_node(n // 2 - 1) if kind == "null" else w.chain_node(n - 2)
    return next(e.id for e in events if e.type == "behavior.completed"
                and e.payload.get("behavior") == before)


def _fork_behaviors(kind: str, n: int) -> tuple[list[Any], list[Any]]:
    """(the base's behaviors, the fork's behaviors)."""
    if kind == "worker0":
        return fanout_behaviors(n), fanout_behaviors(n, w.CHANGED_WORKER_PROMPT)
    base = chain_behaviors(n)
    return base, (base if kind == "null" else chain_behaviors(n, w.CHANGED_LAST_PROMPT))


def fork_run(kind: str, n: int, latency_ms: float, directory: Path) -> Outcome:
    """Load the recorded run, fork it at the event before the node, run the fork to idle."""
    model = FakeModel(latency_ms)
    run_id = load_meta(directory)["run_id"]

    def go() -> Runtime:
        base_behaviors, fork_behaviors = _fork_behaviors(kind, n)
        provider = FakeProvider(model)
        base = Runtime.load(str(directory / STORE), run_id, behaviors=base_behaviors,
                            llm_provider=provider)
        child = base.fork(_fork_point(base.graph.events, kind, n), label=kind,
                          behaviors=fork_behaviors, llm_provider=provider,
                          replay_llm_cache=True)
        child.run_until_idle()
        return child

    seconds, child = timed(go)
    _check_clean(child)
    return Outcome(seconds=seconds, calls=model.calls,
                   final=final_text(child.graph, "fanout" if kind == "worker0" else "chain"))


def _check_clean(runtime: Runtime) -> None:
    if runtime.errors:
        raise RuntimeError(f"activegraph behaviors failed: {runtime.errors[:3]}")
