"""Bring your own LangGraph agent: LangGraph's time travel against a forklab fork of the SAME code.

Issue 33 point 5 (SPEC §7). One support agent is written once, as LangGraph's docs write
one: a ``StateGraph`` over langchain-openai's ``ChatOpenAI`` with a model node (``agent``),
a ``ToolNode`` (``tools``) and an ``intake`` node that hands the agent the next ticket of
its queue. Its tools, ``lookup_order`` (a read) and ``issue_refund`` (a write), are
LangChain tools that are also ``@forklab.tool`` functions, and count every execution.
Every model call goes over HTTP to the loopback vendor stub (tests/vendor_stub), started
in this process, whose replies depend on the conversation: with parallel tool calls off it
asks for ``lookup_order``, then ``issue_refund`` (arguments taken from the ticket), then
answers from the results. So a queue of N tickets is 3N model turns and 2N tool calls
(5 tickets: 15 turns, 5 lookups, 5 refunds). The stub counts every request it receives:
that is "requests paid".

The same code runs in both systems:

- **LangGraph** compiles it with its own checkpointer (``InMemorySaver``) and records a
  thread. Its fork at turn k is its time travel: the checkpoint whose ``next`` is
  ``agent`` with k - 1 AI messages (``get_state_history``, newest first, found once on the
  untouched thread and timed apart), ``graph.update_state(that, {...}, as_node=…)``, then
  ``graph.invoke(None, new_config)``. "No change" is its replay: ``invoke(None,
  checkpoint)``.
- **forklab** records the function that invokes the graph (compiled without a
  checkpointer) as a workflow run (``@forklab.workflow``, ``run_recorded`` into a
  ``MemoryStore``), then ``fork(base, at={"before_call": "support_queue#1/agent/openai:k"},
  change=…, policy={"memoize": True})`` (a ``tool_result`` change with no ``at``: it forks
  right before its lookup, the call whose result LangGraph's ``update_state`` replaces at
  the checkpoint before turn k — no lookup runs in either). The code re-executes from its
  start, the calls before the point are answered from the log, the change applies at its
  call key, later calls run live or are served when their request equals the base's; the
  write obeys the side-effect guard.

The changes, each at turn k = the second turn of a ticket (the turn that reads the
ticket's lookup and asks for its refund), for the first, middle and last ticket:

| change | LangGraph (at the checkpoint before turn k) | forklab |
| --- | --- | --- |
| lookup result replaced ("lost in transit") | ``update_state`` with the ``ToolMessage`` of the same id, ``as_node="tools"`` | ``change.tool_result("…/tools/tool:lookup_order#t", …)`` |
| turn k's reply replaced: no refund | ``update_state`` with an ``AIMessage`` (text), ``as_node="agent"`` | ``change.reply("…/agent/openai:k", text=…)`` |
| turn k's reply asks for another refund (99.0) | the same with that tool call | ``change.reply(…, tool_calls=[…])``: a write the base never made |
| no change | replay: ``invoke(None, checkpoint)`` | null fork |

Checks (a failed one is marked ✗ and the command exits 1): both systems' recordings send
the stub the same requests; for the first two changes both forks send the same requests and
end with the same answer (so "the same change" is verified, not assumed); a replay resends
the base's requests from turn k; a null fork makes none.

Run from the repository root: ``.venv/bin/python bench/bench_byo_langgraph.py`` (about a
minute; ``--quick`` for 2 tickets, one run per figure; ``--profile`` for where a forklab
null fork's time goes). Needs the ``bench`` extra (langgraph, langchain-openai). Figures
are printed, never asserted; today's are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool as lc_tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

import forklab
from bench.bench_tool_loop import ms, print_table
from bench.peers.report import TIMES
from forklab.engine import change, fork
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.fork.result import ForkResult
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.workflows import workflow_graph
from tests.vendor_stub import VendorStub

WORKFLOW = "support_queue"
PATH = "bench.bench_byo_langgraph:support_queue"
MODEL = "gpt-4.1-mini"
SYSTEM = "You are the support agent of an online shop. Use the tools; be brief."
NO_REFUND = "The order was lost in transit: a replacement is on its way, no refund is due."
NEW_AMOUNT = 99.0
NO_BUDGET = {"max_live_calls": None, "max_cost_usd": None}
PLAIN = "the agent alone: no checkpointer, not recorded"
KINDS = ("lookup", "reply", "new write", "none")
KIND_LABELS = {"lookup": "lookup result replaced", "reply": "reply replaced: no refund",
               "new write": "reply asks another refund", "none": "no change (replay)"}

Row = list[str]


# -- the world the agent acts on: counted, with an optional latency ---------------------------


@dataclass
class Meter:
    """What the outside world did: tool executions (model requests are the stub's)."""

    lookups: int = 0
    refunds: list[float] = field(default_factory=list)  # the amounts refunded, in order
    tool_s: float = 0.0  # each tool's latency (a database, a payment API)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def reset(self) -> None:
        with self._lock:
            self.lookups, self.refunds = 0, []

    def lookup(self) -> None:
        self._wait()
        with self._lock:
            self.lookups += 1

    def refund(self, amount: float) -> None:
        self._wait()
        with self._lock:
            self.refunds.append(amount)

    def _wait(self) -> None:
        if self.tool_s:
            time.sleep(self.tool_s)


METER = Meter()


class SlowStub(VendorStub):
    """The vendor stub answering after ``latency_s`` (a model's own time)."""

    latency_s = 0.0

    def answer(self, path: str, headers: dict[str, str], raw: bytes,
               ) -> tuple[int, dict[str, str], bytes]:
        if self.latency_s:
            time.sleep(self.latency_s)
        return super().answer(path, headers, raw)


# -- the agent, written once ------------------------------------------------------------------


@lc_tool
@forklab.tool(effect="read")
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by its id."""
    METER.lookup()
    return {"order_id": order_id, "status": "delivered", "damaged": True}


@lc_tool
@forklab.tool(effect="write")
def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund an order (money leaves the company)."""
    METER.refund(amount)
    return {"order_id": order_id, "refunded": amount}


class Queue(MessagesState):
    tickets: list[str]  # the tickets not yet handed to the agent


def build(checkpointer: Any = None) -> Any:
    """The support agent: ``intake`` → ``agent`` ⇄ ``tools``, back to ``intake`` after an
    answer while tickets remain."""
    tools = [lookup_order, issue_refund]
    llm = ChatOpenAI(model=MODEL, max_retries=0).bind_tools(tools, parallel_tool_calls=False)

    def intake(state: Queue) -> dict[str, Any]:
        return {"messages": [("user", state["tickets"][0])], "tickets": state["tickets"][1:]}

    def agent(state: Queue) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    def route(state: Queue) -> str:
        if getattr(state["messages"][-1], "tool_calls", None):
            return "tools"
        return "intake" if state["tickets"] else END

    graph = StateGraph(Queue)
    graph.add_node("intake", intake)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "intake")
    graph.add_edge("intake", "agent")
    graph.add_conditional_edges("agent", route, ["tools", "intake", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def start(tickets: Sequence[str]) -> dict[str, Any]:
    return {"messages": [("system", SYSTEM)], "tickets": list(tickets)}


def config(tickets: int, thread: str | None = None) -> dict[str, Any]:
    """Six steps a ticket (intake, 3 agent turns, 2 tool steps), with room."""
    out: dict[str, Any] = {"recursion_limit": 6 * tickets + 10}
    if thread is not None:
        out["configurable"] = {"thread_id": thread}
    return out


@forklab.workflow(WORKFLOW)
def support_queue(tickets: list[str]) -> str:
    """The agent as forklab records it: the same graph, invoked by a workflow function."""
    final = build().invoke(start(tickets), config(len(tickets)))
    return str(final["messages"][-1].content)


def queue(n: int) -> list[str]:
    return [f"Order A-{1001 + i} arrived damaged, please refund {10 + i}.50" for i in range(n)]


def order_of(ticket: int) -> str:
    return f"A-{1001 + ticket}"


def changed_lookup(ticket: int) -> dict[str, Any]:
    return {"order_id": order_of(ticket), "status": "lost in transit", "damaged": False}


def turns_at(n: int) -> list[int]:
    """Turn k = 3t + 2 (reads ticket t's lookup, asks its refund) for the first, middle and
    last ticket t."""
    return sorted({3 * t + 2 for t in (0, (n - 1) // 2, n - 1)})


def ticket_of(k: int) -> int:
    return (k - 2) // 3


# -- one measured operation -------------------------------------------------------------------


@dataclass
class Sample:
    """One system's figures for one operation: walls of every repeat, the calls of the last."""

    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)  # the process's (the stub's thread too)
    requests: int = 0
    lookups: int = 0
    refunds: list[float] = field(default_factory=list)
    status: str = "completed"
    answer: str = ""
    bodies: list[Any] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpus)

    @property
    def tools(self) -> int:
        return self.lookups + len(self.refunds)


def measure(stub: VendorStub, sample: Sample, fn: Callable[[], tuple[str, str]]) -> None:
    """Run ``fn`` (→ status, answer) once from zero counts; add its wall, keep its calls."""
    stub.reset()
    METER.reset()
    started, cpu = time.perf_counter(), time.process_time()
    status, answer = fn()
    sample.walls.append(time.perf_counter() - started)
    sample.cpus.append(time.process_time() - cpu)
    sample.requests = len(stub.requests)
    sample.lookups, sample.refunds = METER.lookups, list(METER.refunds)
    sample.status, sample.answer = status, answer
    sample.bodies = stub.bodies("openai")


# -- LangGraph: its checkpointer and time travel ----------------------------------------------


class TimeTravel:
    """The agent compiled on an ``InMemorySaver``; one recorded thread per latency."""

    def __init__(self, tickets: int) -> None:
        self.tickets = tickets
        self.graph = build(InMemorySaver())
        self.threads = itertools.count()
        self.base: dict[str, Any] = {}
        self.before: dict[int, Any] = {}  # turn k → the checkpoint before it

    def record(self) -> tuple[str, str]:
        self.base = config(self.tickets, f"t{next(self.threads)}")
        out = self.graph.invoke(start(queue(self.tickets)), self.base)
        return "completed", str(out["messages"][-1].content)

    def before_turn(self, k: int) -> Any:
        """The checkpoint whose next step is the agent's turn k: ``get_state_history``,
        newest first, stopping at the first match (as LangGraph's time-travel guide does)."""
        for snapshot in self.graph.get_state_history(self.base):
            ai = sum(isinstance(m, AIMessage) for m in snapshot.values.get("messages", []))
            if snapshot.next == ("agent",) and ai == k - 1:
                return snapshot
        raise SystemExit(f"LangGraph: no checkpoint before turn {k}")

    def fork(self, kind: str, k: int) -> tuple[str, str]:
        snapshot = self.before[k]
        limit = config(self.tickets)
        if kind == "none":
            out = self.graph.invoke(None, {**snapshot.config, **limit})
            return "completed", str(out["messages"][-1].content)
        ticket = ticket_of(k)
        if kind == "lookup":
            last = snapshot.values["messages"][-1]
            assert isinstance(last, ToolMessage) and last.name == "lookup_order", last
            # the content the ToolNode would have made of that result (langchain's
            # ``_stringify``), under the same message id: ``add_messages`` replaces it
            update: Any = ToolMessage(content=json.dumps(changed_lookup(ticket),
                                                         ensure_ascii=False),
                                      tool_call_id=last.tool_call_id, name=last.name,
                                      id=last.id)
            as_node = "tools"
        elif kind == "reply":
            update, as_node = AIMessage(content=NO_REFUND), "agent"
        else:
            update = AIMessage(content="", tool_calls=[{
                "name": "issue_refund", "id": "call_changed",
                "args": {"order_id": order_of(ticket), "amount": NEW_AMOUNT}}])
            as_node = "agent"
        new = self.graph.update_state(snapshot.config, {"messages": [update]}, as_node=as_node)
        out = self.graph.invoke(None, {**new, **limit})
        return "completed", str(out["messages"][-1].content)


# -- forklab: the same code as a workflow run, forked -----------------------------------------


class Forklab:
    """The workflow recorded into a ``MemoryStore``; forks at a call key, memoize on."""

    def __init__(self, tickets: int) -> None:
        self.tickets = tickets
        env = Environment(clock=FixedClock(), ids=counter_ids())
        env.workflows.register(PATH, support_queue)
        self.env = env
        self.graph = workflow_graph(env.workflows, PATH)
        self.base: RecordedRun | None = None

    def record(self) -> tuple[str, str]:
        self.base = run_recorded(self.graph, {"tickets": queue(self.tickets)}, env=self.env)
        return self.base.state.status, str(self.base.memory.get("output", ""))

    def fork(self, kind: str, k: int) -> tuple[str, str]:
        assert self.base is not None
        turn = f"{WORKFLOW}#1/agent/openai:{k}"
        ticket = ticket_of(k)
        changes: Any = {
            "none": None,
            "lookup": change.tool_result(
                f"{WORKFLOW}#1/tools/tool:lookup_order#{ticket + 1}", changed_lookup(ticket)),
            "reply": change.reply(turn, text=NO_REFUND),
            "new write": change.reply(turn, tool_calls=[{
                "name": "issue_refund",
                "arguments": {"order_id": order_of(ticket), "amount": NEW_AMOUNT}}]),
        }[kind]
        # a tool_result change forks at its own call (right before that lookup, SPEC §6.2);
        # the others at turn k, where LangGraph's checkpoint is
        at = None if kind == "lookup" else {"before_call": turn}
        result: ForkResult = fork(self.base, at=at, change=changes, policy={"memoize": True},
                                  budget=NO_BUDGET)
        state = result.state
        assert state is not None
        return state.status, str(state.memory.get("output", ""))


# -- the measurements -------------------------------------------------------------------------


@dataclass
class Setting:
    name: str
    model_ms: float
    tool_ms: float


@dataclass
class Figures:
    """One setting's samples: ``record[system]``, ``forks[(kind, k, system)]``, ``find[k]``."""

    record: dict[str, Sample] = field(default_factory=dict)
    forks: dict[tuple[str, int, str], Sample] = field(default_factory=dict)
    find: dict[int, list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def run_setting(stub: SlowStub, setting: Setting, tickets: int, repeat: int) -> Figures:
    stub.latency_s, METER.tool_s = setting.model_ms / 1000, setting.tool_ms / 1000
    figures = Figures()
    systems: dict[str, Any] = {"forklab": Forklab(tickets), "LangGraph": TimeTravel(tickets)}
    recorders = {name: system.record for name, system in systems.items()}
    recorders[PLAIN] = functools.partial(plain_run, tickets)
    for record in recorders.values():
        record()  # first use (imports, connections, caches) is not the figure
    for round_ in range(repeat):
        for name in _ordered(recorders, round_):
            measure(stub, figures.record.setdefault(name, Sample()), recorders[name])
    lg: TimeTravel = systems["LangGraph"]
    for k in turns_at(tickets):
        for _ in range(repeat):
            started = time.perf_counter()
            lg.before[k] = lg.before_turn(k)
            figures.find.setdefault(k, []).append(time.perf_counter() - started)
    for round_ in range(repeat):
        for k in turns_at(tickets):
            for kind in KINDS:
                for name in _ordered(systems, round_):
                    sample = figures.forks.setdefault((kind, k, name), Sample())
                    measure(stub, sample, functools.partial(systems[name].fork, kind, k))
    figures.failures = check(figures, tickets)
    return figures


def plain_run(tickets: int) -> tuple[str, str]:
    """The agent run as it runs in production: no checkpointer, not recorded (the
    reference both recordings' overhead is read against)."""
    out = build().invoke(start(queue(tickets)), config(tickets))
    return "completed", str(out["messages"][-1].content)


def _ordered(systems: dict[str, Any], round_: int) -> list[str]:
    """Alternate which system goes first, so neither always runs on a warmer cache."""
    names = list(systems)
    return names if round_ % 2 == 0 else names[::-1]


def check(figures: Figures, tickets: int) -> list[str]:
    """What must hold for the comparison to mean anything (see the module docstring)."""
    failures = []
    fl, lg = figures.record["forklab"], figures.record["LangGraph"]
    for name, sample in figures.record.items():  # the plain run's too
        if (sample.requests, sample.lookups, len(sample.refunds)) != (3 * tickets, tickets,
                                                                      tickets):
            failures.append(f"{name} recording made {sample.requests} requests, "
                            f"{sample.tools} tool calls")
    if fl.bodies != lg.bodies:
        failures.append("the two recordings sent different requests")
    for (kind, k, name), sample in figures.forks.items():
        if name != "forklab":
            continue
        peer = figures.forks[(kind, k, "LangGraph")]
        where = f"{KIND_LABELS[kind]} at turn {k}"
        if kind in ("lookup", "reply") and (sample.bodies != peer.bodies
                                            or sample.answer != peer.answer):
            failures.append(f"{where}: the forks sent different requests or answered apart")
        if kind == "none" and (sample.requests or sample.answer != fl.answer
                               or peer.bodies != lg.bodies[k - 1:]):
            failures.append(f"{where}: not a reproduction")
        if kind == "new write" and (sample.status != "blocked"
                                    or NEW_AMOUNT not in peer.refunds):
            failures.append(f"{where}: forklab {sample.status}, LangGraph refunds "
                            f"{peer.refunds}")
    return failures


# -- the tables -------------------------------------------------------------------------------


def ratio(peer: float, ours: float) -> str:
    if not ours:
        return "—"
    value = peer / ours
    return f"{value:.2f}{TIMES}" if value < 1 else f"{value:.1f}{TIMES}"


def record_rows(settings: Sequence[Setting], figures: Sequence[Figures]) -> list[Row]:
    rows = []
    for setting, fig in zip(settings, figures, strict=True):
        fl, lg, plain = fig.record["forklab"], fig.record["LangGraph"], fig.record[PLAIN]
        rows.append([setting.name, f"{plain.requests} / {plain.tools}"]
                    + [f"{ms(s.wall)} / {ms(s.cpu)}" for s in (plain, fl, lg)]
                    + [f"{ratio(lg.wall, fl.wall)} / {ratio(lg.cpu, fl.cpu)}"])
    return rows


def writes(sample: Sample) -> str:
    if sample.status == "blocked":
        return "0: blocked"
    return str(len(sample.refunds)) + (" (99.0 among them)" if NEW_AMOUNT in sample.refunds
                                       else "")


def fork_rows(tickets: int, settings: Sequence[Setting], figures: Sequence[Figures],
              ) -> list[Row]:
    rows = []
    first = figures[0]
    for k in turns_at(tickets):
        for kind in KINDS:
            fl, lg = first.forks[(kind, k, "forklab")], first.forks[(kind, k, "LangGraph")]
            line = [f"{k} of {3 * tickets}", KIND_LABELS[kind],
                    f"{fl.requests} / {lg.requests}",
                    f"{fl.lookups} + {len(fl.refunds)} / {lg.lookups} + {len(lg.refunds)}",
                    f"{writes(fl)} / {writes(lg)}"]
            for fig in figures:
                fl, lg = fig.forks[(kind, k, "forklab")], fig.forks[(kind, k, "LangGraph")]
                line.append(f"{ms(fl.wall)} / {ms(lg.wall)} ({ratio(lg.wall, fl.wall)})")
            rows.append(line)
    return rows


def find_rows(tickets: int, settings: Sequence[Setting], figures: Sequence[Figures],
              ) -> list[Row]:
    return [[f"{k} of {3 * tickets}"] + [ms(statistics.median(fig.find[k])) for fig in figures]
            for k in turns_at(tickets)]


PACKAGES = {"langchain_core": "langchain", "langchain_openai": "langchain",
            "httpcore": "httpx", "h11": "httpx", "httpx2": "httpx", "pydantic_core": "pydantic"}


def package_of(path: str) -> str:
    """Whose code a profiled function is: a site-package, forklab, or Python itself."""
    if "site-packages/" in path:
        name = path.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
        return PACKAGES.get(name, name)
    if "/forklab/" in path:
        return "forklab"
    if "/bench/" in path:
        return "the agent's own code (this file)"
    return "Python (stdlib, builtins: typing, json, … called by the above)"


def profile_rows(stub: SlowStub, tickets: int) -> list[Row]:
    """cProfile one forklab null fork at the last turn k at 0 ms — its whole cost is
    re-executing the code with every call served — and sum each package's own time."""
    import cProfile
    import pstats

    stub.latency_s, METER.tool_s = 0.0, 0.0
    system = Forklab(tickets)
    system.record()
    k = turns_at(tickets)[-1]
    system.fork("none", k)  # first use is not the figure
    profiler = cProfile.Profile()
    profiler.runcall(system.fork, "none", k)
    own: dict[str, float] = {}
    building = 0.0  # the openai client turning each request's arguments into its body
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    for (path, _, function), row in stats.items():
        own[package_of(path)] = own.get(package_of(path), 0.0) + row[2]  # tottime
        if path.endswith("openai/_utils/_transform.py") and function == "maybe_transform":
            building += row[3]  # cumtime
    total = sum(own.values())
    rows = [[name, ms(seconds), f"{seconds / total:.0%}"]
            for name, seconds in sorted(own.items(), key=lambda item: -item[1])]
    return [*rows, ["of all these: the openai client building request bodies "
                    "(`maybe_transform`, cumulative)", ms(building), f"{building / total:.0%}"]]


@contextmanager
def pointed_at(stub: VendorStub) -> Iterator[None]:
    """``ChatOpenAI`` reaches the stub as a team's client reaches the vendor: through the
    ``openai`` client's own environment variables (restored afterwards)."""
    values = {"OPENAI_BASE_URL": stub.openai_base_url, "OPENAI_API_KEY": "sk-bench"}
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tickets", type=int, default=5, help="tickets in the queue (3 model "
                        "turns and 2 tool calls each; default 5)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--model-ms", type=float, default=20.0,
                        help="the stub's latency per request in the second setting")
    parser.add_argument("--tool-ms", type=float, default=5.0,
                        help="each tool's latency in the second setting")
    parser.add_argument("--quick", action="store_true", help="2 tickets, one run per figure")
    parser.add_argument("--profile", action="store_true", help="only: where a forklab null "
                        "fork's time goes (cProfile, own time by package)")
    args = parser.parse_args(argv)
    tickets, repeat = (2, 1) if args.quick else (args.tickets, args.repeat)
    if tickets < 1:
        parser.error("--tickets must be at least 1")
    settings = [Setting("0 ms", 0.0, 0.0)]
    if args.model_ms or args.tool_ms:
        settings.append(Setting(f"model {args.model_ms:g} ms, tools {args.tool_ms:g} ms",
                                args.model_ms, args.tool_ms))
    if args.profile:
        stub = SlowStub()
        with stub, pointed_at(stub):
            rows = profile_rows(stub, tickets)
        print(f"# One forklab null fork at turn {turns_at(tickets)[-1]} of {3 * tickets}, 0 ms, "
              "under cProfile: own time by package\n")
        print_table(["code", "own time (profiled)", "share"], rows)
        return 0
    started = time.perf_counter()
    print(f"# A LangGraph support agent, {tickets} tickets ({3 * tickets} model turns, "
          f"{2 * tickets} tool calls): LangGraph time travel vs a forklab fork of the same "
          f"code; median of {repeat}; load average {os.getloadavg()[0]:.2f}\n")
    stub = SlowStub()
    with stub, pointed_at(stub):
        figures = [run_setting(stub, s, tickets, repeat) for s in settings]

    print("## Recording (every recording made the same requests and tool calls)\n")
    print("wall / the process's CPU (the stub's thread included: the same work in every "
          "column)\n")
    print_table(["setting", "requests / tools run", PLAIN, "forklab workflow run",
                 "LangGraph, InMemorySaver", f"LangGraph / forklab ({TIMES}, wall / CPU)"],
                record_rows(settings, figures))
    print("## Fork at turn k\n")
    print("requests paid = requests the stub received; tools run = lookups + refunds really "
          "executed; refunds run again = the write's executions in the fork. Wall: forklab = "
          "fork() whole; LangGraph = update_state + invoke (finding the checkpoint is the "
          "next table). Ratio = LangGraph / forklab: above 1, forklab is faster.\n")
    print_table(["turn k", "change", "requests paid: forklab / LangGraph",
                 "tools run: forklab / LangGraph", "refunds run again: forklab / LangGraph"]
                + [f"wall, {s.name}: forklab / LangGraph ({TIMES})" for s in settings],
                fork_rows(tickets, settings, figures))
    print("## LangGraph: finding the checkpoint before turn k (get_state_history walk)\n")
    print_table(["turn k"] + [s.name for s in settings], find_rows(tickets, settings, figures))
    failures = [f for fig in figures for f in fig.failures]
    for failure in failures:
        print(f"✗ {failure}")
    print(f"total {time.perf_counter() - started:.1f} s; load average "
          f"{os.getloadavg()[0]:.2f}")
    return 1 if failures else 0


if __name__ == "__main__":
    # run as the module the workflow's path names, so the tools, their counters and the
    # recorded tool paths are one copy (``bench.bench_byo_langgraph``), not ``__main__``'s
    from bench import bench_byo_langgraph

    sys.exit(bench_byo_langgraph.main())
