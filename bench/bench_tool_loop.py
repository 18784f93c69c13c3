"""A 50-turn tool loop: recording overhead, forks at a turn, and LangGraph's time travel.

Issue 32's performance points for the tool loop (SPEC §6). The workload is one agent node
``loop`` whose model asks for one tool call per turn for 49 turns (``read_page`` with
``{"page": n}``), then answers: 50 model turns + 49 tool calls = 99 recorded calls. The
model is a deterministic provider (:class:`LoopModel`) that decides by the conversation's
length — so a fork's tail asks what the base asked — sleeps a fixed latency (0 or 5 ms)
and counts every request it really answers; the tools count every execution. Counting in
the provider and the tools, not in forklab's labels, is what makes "0 calls" a measurement.

Rows (figures are printed, never asserted; timings belong here, not in tests):

1. ``record``: ``run_recorded`` of the loop into a ``MemoryStore`` and into a ``SqliteStore``
   file, at 0 ms and 5 ms (and LangGraph's recording of the same loop). Overhead per call
   = (wall - the provider's own time - the tools' own time) / 99, and the process's CPU
   / 99. Target **≤ 1 ms per call**; ratio = target / figure (≥ 1.00 meets it).
2. ``null fork``: ``fork(base, at={"before_call": "loop#1/turn:k"}, policy={"memoize": True})``
   for k = 1, 25, 50 (0 ms base), interleaved round by round with a null fork at node
   granularity (``{"before_node": "loop"}``). Calls made must be 0; target: a fork at a turn
   costs no more than the node-level fork (ratio = node CPU / turn CPU, ≥ 1.00 meets it).
3. ``fork at turn k``: ``change.reply("loop#1/turn:k", text=…, tool_calls=[the base's call])``
   with memoize on and off, and ``change.rerun("loop#1/turn:k")``: the requests and tool
   executions the fork really made, against the floor (turns k+1…50 and tools k…49:
   50 - k each) — the prefix is never paid.
4. ``LangGraph``: the same loop as a LangGraph ``StateGraph`` (an ``agent`` node over a
   ``BaseChatModel`` that binds tools and behaves like :class:`LoopModel`, a ``ToolNode``,
   ``tools_condition``), checkpointed by ``MemorySaver``. Its fork at turn k is its time
   travel: the checkpoint whose ``next`` is ``agent`` with k - 1 AI messages so far (found
   once by walking ``get_state_history``, timed apart), ``graph.update_state(that,
   {"messages": [the changed reply]}, as_node="agent")``, then ``graph.invoke(None,
   new_config)``; its replay (``invoke(None, checkpoint)``, no change) stands beside
   forklab's null fork. A write variant (``append_note``, counting side effects) shows which
   system runs the write again: LangGraph's tail re-executes every write; forklab's guard
   serves a write the base made with the same arguments and blocks one it never made.

Run from the repository root: ``.venv/bin/python bench/bench_tool_loop.py`` (about a
minute; ``--quick`` for a smoke run, ``--no-langgraph`` without the peer).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forklab.engine import change, fork, parse_graph, run_recorded
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.graph import GraphSpec
from forklab.engine.providers import (
    ChatRequest,
    ChatResponse,
    ProviderRegistry,
    ToolCallRequest,
)
from forklab.engine.recording import RecordedRun
from forklab.engine.sqlite_store import SqliteStore

TURNS = 50  # model turns: TURNS - 1 ask for a tool, the last answers
TOOL_CALLS = TURNS - 1
CALLS = TURNS + TOOL_CALLS
KS = (1, 25, 50)
LATENCY_MS = 5
OVERHEAD_TARGET_MS = 1.0
READ_FN = "bench.bench_tool_loop.read_page"
WRITE_FN = "bench.bench_tool_loop.append_note"
NO_BUDGET = {"max_live_calls": None, "max_cost_usd": None}

Row = list[str]


# -- the workload ------------------------------------------------------------------------------


class Meter:
    """Counts and times what the outside world does: model requests, tool executions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.tools = 0
        self.writes = 0  # side effects of the write tool
        self.seconds = 0.0  # the provider's and the tools' own wall time

    def add(self, seconds: float, *, request: bool = False, tool: bool = False,
            write: bool = False) -> None:
        with self._lock:
            self.requests += request
            self.tools += tool
            self.writes += write
            self.seconds += seconds

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


METER = Meter()


def page_text(page: int) -> str:
    return f"page {page}: " + "lorem ipsum " * 8


def read_page(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    started = time.perf_counter()
    out = {"page": args["page"], "text": page_text(args["page"])}
    METER.add(time.perf_counter() - started, tool=True)
    return out


def append_note(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    started = time.perf_counter()
    out = {"noted": args["page"]}
    METER.add(time.perf_counter() - started, tool=True, write=True)
    return out


def next_step(tool_results: int) -> tuple[str, int | None]:
    """The model's policy, by the conversation's length: ask for page n+1, or answer."""
    if tool_results < TOOL_CALLS:
        return "", tool_results + 1
    return f"Read {tool_results} pages.", None


class LoopModel:
    """forklab's provider: deterministic, fixed latency, counts every request it answers."""

    name = "scripted"

    def __init__(self, tool: str, latency_ms: float) -> None:
        self.tool = tool
        self.latency = latency_ms / 1000

    def complete(self, request: ChatRequest) -> ChatResponse:
        started = time.perf_counter()
        if self.latency:
            time.sleep(self.latency)
        done = sum(1 for m in request.messages if m.get("role") == "tool")
        text, page = next_step(done)
        calls = () if page is None else (
            ToolCallRequest(id=f"call_{page}", name=self.tool, arguments={"page": page}),)
        response = ChatResponse(text=text, input_tokens=10 + 20 * done, output_tokens=8,
                                tool_calls=calls,
                                finish_reason="tool_calls" if calls else "stop")
        METER.add(time.perf_counter() - started, request=True)
        return response


def loop_graph(tool: str) -> GraphSpec:
    fn, effect = (WRITE_FN, "write") if tool == "append_note" else (READ_FN, "read")
    return parse_graph({
        "id": f"tool-loop-{tool}",
        "start": "loop",
        "tools": {tool: {"fn": fn, "effect": effect, "description": "One page.",
                         "parameters": {"type": "object",
                                        "properties": {"page": {"type": "integer"}},
                                        "required": ["page"]}}},
        "agents": {"reader": {"model": "scripted-small", "max_turns": TURNS,
                              "system_prompt": "Read every page, then summarise.",
                              "tools": [tool]}},
        "nodes": [{"id": "loop", "kind": "agent", "agent": "reader", "reads": ["task"],
                   "writes": ["answer"], "prompt": "{task}"}],
    })


def environment(tool: str, latency_ms: float) -> Environment:
    env = Environment(clock=FixedClock(), ids=counter_ids("run"),
                      providers=ProviderRegistry({"scripted": LoopModel(tool, latency_ms)}))
    env.tools.register(READ_FN, read_page)
    env.tools.register(WRITE_FN, append_note)
    return env


def record(tool: str = "read_page", latency_ms: float = 0, store: Any = None) -> RecordedRun:
    base = run_recorded(loop_graph(tool), {"task": "Read the report."}, store=store,
                        env=environment(tool, latency_ms))
    if base.state.status != "completed":
        raise SystemExit(f"bench run ended {base.state.status}: {base.state.error}")
    return base


def changed_reply(k: int, tool: str, page: int | None = None) -> dict[str, Any]:
    """Turn k's reply with another text; its tool call is the base's unless ``page``."""
    page = page if page is not None else k
    calls = [] if k == TURNS else [{"name": tool, "arguments": {"page": page}}]
    return {"text": f"(turn {k} changed)", "tool_calls": calls}


# -- helpers -----------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def measured(repeat: int, fn: Callable[[], Any]) -> tuple[float, Meter, Any]:
    """Median wall seconds of ``repeat`` runs; the meter and result of the last one."""
    walls = []
    result = None
    for _ in range(repeat):
        METER.reset()
        started = time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - started)
    return median(walls), METER, result


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def print_table(header: list[str], rows: list[Row]) -> None:
    """A markdown table (pasted as is into docs/benchmarks.md)."""
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(" --- " for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()


# -- 1. recording overhead ---------------------------------------------------------------------


def overhead_row(name: str, target: str, samples: list[tuple[float, float, float]]) -> Row:
    """samples: (wall, process CPU, the provider's and tools' own wall) of each recording.
    Overhead / call on wall = (wall - own) / CALLS; on CPU = CPU / CALLS (the provider's
    and tools' own CPU is in it: a few µs a call, and a sleep takes none)."""
    per_call = median([(wall - own) / CALLS for wall, _, own in samples]) * 1000
    cpu_call = median([cpu / CALLS for _, cpu, _ in samples]) * 1000
    return [name, ms(median([s[0] for s in samples])), ms(median([s[2] for s in samples])),
            f"{per_call:.3f} ms", f"{cpu_call:.3f} ms", target,
            f"{OVERHEAD_TARGET_MS / per_call:.2f} / {OVERHEAD_TARGET_MS / cpu_call:.2f}"]


def record_rows(repeat: int, latencies: Sequence[float]) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for store_name in ("memory", "sqlite"):
            for latency in latencies:
                samples = []
                for i in range(repeat):
                    store = (SqliteStore(Path(tmp) / f"r{latency}-{i}.sqlite3")
                             if store_name == "sqlite" else None)
                    METER.reset()
                    wall, cpu = time.perf_counter(), time.process_time()
                    record("read_page", latency, store)
                    samples.append((time.perf_counter() - wall, time.process_time() - cpu,
                                    METER.seconds))
                    if METER.requests != TURNS or METER.tools != TOOL_CALLS:
                        raise SystemExit(f"recording made {METER.requests} requests, "
                                         f"{METER.tools} tool calls")
                rows.append(overhead_row(f"forklab, {store_name}, {latency:g} ms",
                                         f"≤ {OVERHEAD_TARGET_MS:g} ms", samples))
    return rows


# -- 2. null forks -----------------------------------------------------------------------------


def null_rows(repeat: int) -> list[Row]:
    """Null forks at node granularity and at turns, interleaved round by round (so the
    host's load falls on all of them alike), ``5 * repeat`` rounds: median wall and CPU."""
    base = record()
    points: list[tuple[str, Any]] = [("before_node loop", {"before_node": "loop"})]
    points += [(f"before_call turn:{k}", {"before_call": f"loop#1/turn:{k}"}) for k in KS]
    walls: dict[str, list[float]] = {name: [] for name, _ in points}
    cpus: dict[str, list[float]] = {name: [] for name, _ in points}
    calls: dict[str, int] = dict.fromkeys(walls, 0)
    for _ in range(5 * repeat):
        for name, at in points:
            METER.reset()
            wall, cpu = time.perf_counter(), time.process_time()
            result = fork(base, at=at, policy={"memoize": True})
            walls[name].append(time.perf_counter() - wall)
            cpus[name].append(time.process_time() - cpu)
            calls[name] += METER.requests + METER.tools
            check(result, base)
    node = "before_node loop"
    rows = []
    for name, _ in points:
        wall, cpu = median(walls[name]), median(cpus[name])
        is_node = name == node
        rows.append([f"null fork {name}", ms(wall), ms(cpu), str(calls[name]),
                     "—" if is_node else f"≤ {ms(median(cpus[node]))} CPU, 0 calls",
                     "—" if is_node else f"{median(cpus[node]) / cpu:.2f}"])
    return rows


def check(result: Any, base: RecordedRun) -> None:
    if result.state.status != "completed" or result.state.memory != base.state.memory:
        raise SystemExit(f"null fork ended {result.state.status}: {result.state.error}")


# -- 3. + 4. forks with a change, beside LangGraph ---------------------------------------------


def forklab_fork(base: RecordedRun, k: int, tool: str, page: int | None = None, *,
                 memoize: bool = True) -> Any:
    reply = changed_reply(k, tool, page)
    return fork(base, change=change.reply(f"loop#1/turn:{k}", **reply),
                policy={"memoize": memoize}, budget=NO_BUDGET)


def tail_rows(repeat: int, latency: float) -> list[Row]:
    """What a fork at turn k really pays: the reply at k changed (memoize on and off), and
    turn k rerun live (memoize on: the rerun's reply equals the base's, so the rest is
    served)."""
    base = record("read_page", latency)
    kinds: list[tuple[str, Callable[[int], Any]]] = [
        ("reply, memoize", lambda k: forklab_fork(base, k, "read_page")),
        ("reply, no memoize", lambda k: forklab_fork(base, k, "read_page", memoize=False)),
        ("rerun, memoize", lambda k: fork(base, change=change.rerun(f"loop#1/turn:{k}"),
                                          policy={"memoize": True}, budget=NO_BUDGET)),
    ]
    rows = []
    for k in KS:
        line = [f"turn:{k}", f"{TURNS - k} / {TURNS - k}"]
        for _, make in kinds:
            wall, meter, result = measured(repeat, lambda make=make, k=k: make(k))
            if result.state.status != "completed":
                raise SystemExit(f"fork at turn {k} ended {result.state.status}")
            line.append(f"{meter.requests} / {meter.tools}, {ms(wall)}")
        rows.append(line)
    return rows


def changed_rows(repeat: int, latency: float, langgraph: bool) -> tuple[list[Row], list[Row]]:
    """Fork at turn k with turn k's reply changed, and null forks / replays from turn k:
    forklab and LangGraph side by side, for the read tool (``rows``) and the write tool
    (``writes``: the side effects each system's tail had)."""
    lg = LangGraphLoop(latency, repeat) if langgraph else None
    rows: list[Row] = []
    writes: list[Row] = []
    for tool in ("read_page", "append_note"):
        base = record(tool, latency)
        lg_base = lg.record(tool) if lg else None
        for kind in ("reply", "null"):
            for k in KS:
                if kind == "reply":
                    name = f"{tool}, turn:{k}'s reply changed"
                    floor = f"{TURNS - k} / {TURNS - k}"
                    wall, meter, result = measured(
                        repeat, lambda k=k, b=base, t=tool: forklab_fork(b, k, t))
                else:
                    name = f"{tool}, no change from turn:{k} (null fork / replay)"
                    floor = "0 / 0"
                    at = {"before_call": f"loop#1/turn:{k}"}
                    wall, meter, result = measured(
                        repeat, lambda at=at, b=base: fork(b, at=at, policy={"memoize": True}))
                if result.state.status != "completed":
                    raise SystemExit(f"{name}: the fork ended {result.state.status}")
                fl_writes = meter.writes
                line = [name, floor, f"{meter.requests} / {meter.tools}", ms(wall)]
                lg_writes = "—"
                if lg and lg_base:
                    if kind == "reply":
                        lw, lmeter, _ = measured(
                            repeat, lambda k=k, b=lg_base, t=tool: lg.fork(b, t, k))
                    else:
                        lw, lmeter, _ = measured(
                            repeat, lambda k=k, b=lg_base: lg.replay(b, k))
                    line += [f"{lmeter.requests} / {lmeter.tools}", ms(lw),
                             ms(lg_base.find[k]), f"{lw / wall:.1f}x"]
                    lg_writes = str(lmeter.writes)
                if tool == "read_page":
                    rows.append(line)
                else:
                    writes.append([name, str(fl_writes), lg_writes])
    # a write the base never made: forklab's guard blocks it, LangGraph runs it
    base = record("append_note", latency)
    METER.reset()
    blocked = forklab_fork(base, 25, "append_note", page=999)
    fl_line = f"{METER.writes} ({blocked.state.status})"
    lg_line = "—"
    if lg:
        lg_base = lg.record("append_note")
        METER.reset()
        lg.fork(lg_base, "append_note", 25, page=999)
        lg_line = f"{METER.writes} (the new one and the 24 after it)"
    writes.append(["append_note, turn:25 asks for a write the base never made (page 999)",
                   fl_line, lg_line])
    return rows, writes


class LoopBase:
    """A LangGraph recording: the compiled graph, its thread, and the checkpoint before each
    turn k of KS, found once on the untouched thread (``find``: median seconds of the walk)."""

    def __init__(self, graph: Any, config: dict[str, Any]) -> None:
        self.graph = graph
        self.config = config
        self.before: dict[int, Any] = {}
        self.find: dict[int, float] = {}


class LangGraphLoop:
    """The same loop on LangGraph: agent node + ToolNode, MemorySaver, time travel."""

    def __init__(self, latency_ms: float, repeat: int) -> None:
        self.repeat = repeat
        self.recorded = (0.0, 0.0, 0.0)  # wall, CPU, the model's and tools' own wall
        from langchain_core.language_models import BaseChatModel
        from langchain_core.messages import AIMessage, ToolMessage
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langchain_core.tools import tool as as_tool
        from langgraph.checkpoint.memory import MemorySaver
        from langgraph.graph import START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition

        latency = latency_ms / 1000
        self.AIMessage = AIMessage
        threads = iter(range(1_000_000))

        class LoopChatModel(BaseChatModel):
            """Behaves like LoopModel: asks for the bound tool by the conversation's length."""

            tool_name: str = "read_page"

            @property
            def _llm_type(self) -> str:
                return "bench-loop"

            def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
                return self.bind(tools=tools, **kwargs)

            def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                          **kwargs: Any) -> ChatResult:
                started = time.perf_counter()
                if latency:
                    time.sleep(latency)
                assert kwargs.get("tools"), "the tools must be bound"
                done = sum(1 for m in messages if isinstance(m, ToolMessage))
                text, page = next_step(done)
                calls = [] if page is None else [
                    {"name": self.tool_name, "args": {"page": page}, "id": f"call_{page}"}]
                message = AIMessage(content=text, tool_calls=calls)
                METER.add(time.perf_counter() - started, request=True)
                return ChatResult(generations=[ChatGeneration(message=message)])

        @as_tool("read_page")
        def lg_read_page(page: int) -> dict[str, Any]:
            """One page."""
            return read_page({"page": page}, None)

        @as_tool("append_note")
        def lg_append_note(page: int) -> dict[str, Any]:
            """One page."""
            return append_note({"page": page}, None)

        def build(tool: str) -> Any:
            fn = lg_read_page if tool == "read_page" else lg_append_note
            model = LoopChatModel(tool_name=tool).bind_tools([fn])

            def agent(state: MessagesState) -> dict[str, Any]:
                return {"messages": [model.invoke(state["messages"])]}

            builder = StateGraph(MessagesState)
            builder.add_node("agent", agent)
            builder.add_node("tools", ToolNode([fn]))
            builder.add_edge(START, "agent")
            builder.add_conditional_edges("agent", tools_condition)
            builder.add_edge("tools", "agent")
            return builder.compile(checkpointer=MemorySaver())

        self.build = build
        self.threads = threads

    def config(self, thread: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": thread}, "recursion_limit": 4 * TURNS}

    def record(self, tool: str) -> LoopBase:
        """Record on a fresh thread (wall in ``self.recorded``), then find the checkpoint
        before each turn of KS on that thread while nothing else is on it."""
        graph = self.build(tool)
        config = self.config(f"t{next(self.threads)}")
        METER.reset()
        started, cpu = time.perf_counter(), time.process_time()
        out = graph.invoke({"messages": [("user", "Read the report.")]}, config)
        self.recorded = (time.perf_counter() - started, time.process_time() - cpu,
                         METER.seconds)
        if METER.requests != TURNS or METER.tools != TOOL_CALLS:
            raise SystemExit(f"LangGraph recording made {METER.requests} requests")
        if out["messages"][-1].content != f"Read {TOOL_CALLS} pages.":
            raise SystemExit("LangGraph recording ended elsewhere")
        base = LoopBase(graph, config)
        for k in KS:
            walls = []
            for _ in range(self.repeat):
                started = time.perf_counter()
                base.before[k] = self.before_turn(base, k)
                walls.append(time.perf_counter() - started)
            base.find[k] = median(walls)
        return base

    def before_turn(self, base: LoopBase, k: int) -> Any:
        """The checkpoint whose next step is the agent's turn k: ``get_state_history``,
        newest first, stopping at the first match (as LangGraph's time-travel guide does)."""
        for snapshot in base.graph.get_state_history(base.config):
            ai = sum(1 for m in snapshot.values.get("messages", [])
                     if isinstance(m, self.AIMessage))
            if snapshot.next == ("agent",) and ai == k - 1:
                return snapshot
        raise SystemExit(f"no checkpoint before turn {k}")

    def fork(self, base: LoopBase, tool: str, k: int, page: int | None = None) -> Any:
        """Time travel: update_state at the checkpoint before turn k, invoke(None, …)."""
        reply = changed_reply(k, tool, page)
        message = self.AIMessage(content=reply["text"], tool_calls=[
            {"name": c["name"], "args": c["arguments"], "id": f"changed_{k}"}
            for c in reply["tool_calls"]])
        new_config = base.graph.update_state(base.before[k].config, {"messages": [message]},
                                             as_node="agent")
        return base.graph.invoke(None, {**new_config, "recursion_limit": 4 * TURNS})

    def replay(self, base: LoopBase, k: int) -> Any:
        """Replay: invoke(None, the checkpoint before turn k) with nothing changed."""
        return base.graph.invoke(None, {**base.before[k].config,
                                        "recursion_limit": 4 * TURNS})


def langgraph_record_rows(repeat: int, latencies: Sequence[float]) -> list[Row]:
    """LangGraph's recording of the same loop (MemorySaver), with the same formula."""
    rows = []
    for latency in latencies:
        lg = LangGraphLoop(latency, 1)
        lg.record("read_page")  # first use, untimed
        samples = []
        for _ in range(repeat):
            lg.record("read_page")
            samples.append(lg.recorded)
        rows.append(overhead_row(f"LangGraph, MemorySaver, {latency:g} ms", "(peer)",
                                 samples))
    return rows


# -- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="one run per figure")
    parser.add_argument("--no-langgraph", action="store_true", help="forklab only")
    args = parser.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    started = time.perf_counter()
    record()  # first use (imports, parsed graph, caches) is not the figure
    print(f"# tool loop: {TURNS} turns, {TOOL_CALLS} tool calls ({CALLS} calls); "
          f"median of {repeat}; load average {os.getloadavg()[0]:.1f}\n")

    langgraph = not args.no_langgraph
    if langgraph:
        try:
            import langgraph as _  # noqa: F401
        except ImportError:
            print("(langgraph is not installed: pip install -e '.[bench]')\n")
            langgraph = False

    print("## 1. Recording overhead per call: (wall - provider - tools) / calls, and the "
          "process's CPU / calls\n")
    rows = record_rows(repeat, (0, LATENCY_MS))
    if langgraph:
        rows += langgraph_record_rows(repeat, (0, LATENCY_MS))
    print_table(["recording", "wall", "provider + tools", "overhead / call (wall)",
                 "CPU / call", "target", "ratio (wall / CPU)"], rows)

    print("## 2. Null forks (0 ms base, memoize): calls must be 0\n")
    print_table(["null fork", "wall", "CPU", "calls made", "target", "ratio (node / turn, CPU)"],
                null_rows(repeat))

    print(f"## 3. Fork at turn k pays only turns ≥ k ({LATENCY_MS} ms model)\n")
    print("requests / tool executions the fork really made, and its wall time; floor = "
          "turns k+1…50 / tools k…49 (turn k's reply is the change)\n")
    print_table(["fork at", "floor", "reply changed, memoize", "reply changed, no memoize",
                 "turn k rerun live, memoize"], tail_rows(repeat, LATENCY_MS))

    rows, writes = changed_rows(repeat, LATENCY_MS, langgraph)
    print(f"## 4. Fork at turn k ({LATENCY_MS} ms model), beside LangGraph's time "
          "travel\n")
    print("requests / tool executions each fork really made (counted in the model and the "
          "tools); floor = turns k+1…50 / tools k…49 for a changed reply, 0 / 0 with no "
          "change. LangGraph wall = update_state + invoke (or invoke alone for a replay); "
          "finding its checkpoint (get_state_history) is the next column, not in it.\n")
    print_table(["fork", "floor", "forklab", "forklab wall", "LangGraph", "LangGraph wall",
                 "LangGraph find point", "LangGraph / forklab (wall)"], rows)
    print("## 4b. Did the write tool run again? (side effects in the fork's tail; the base "
          f"made {TOOL_CALLS})\n")
    print_table(["fork", "forklab writes", "LangGraph writes"], writes)
    print(f"total {time.perf_counter() - started:.1f} s; load average "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
