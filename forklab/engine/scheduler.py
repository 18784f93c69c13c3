"""Parallel branches with a deterministic log.

**The order.** A run's log is the log the sequential scheduler writes: nodes start in
frontier (FIFO) order, one at a time, each node's events contiguous from its ``node.started``
to its ``node.completed``. Concurrency changes *when* a node executes, never *where* its
events go, so replay, fold, fidelity checks and golden logs cannot tell ``max_concurrency``
1 from N.

**How.** The frontier is the order the next nodes will start in (a node's completion only
appends after it). Walking it from the head, the scheduler predicts each node's execution —
occurrence and iteration (they follow from the starts before it), read slice, fingerprint —
and starts it on a thread pool *ahead* of the nodes before it when its prediction is final:

- no node before it (not yet completed) may write a key it reads (declared ``writes``;
  nothing is started past an approval at all), so its read slice and the
  taint of it are what the sequential run would give it;
- nothing before it is a tool (user code, which may fail the run; a write tool also touches
  the outside world), a subgraph, an approval, or a node beyond ``max_iterations`` (the run
  stops there);
- under an enforced fork budget, the worst case of every node before it plus its own still
  fits the budget (reserved before calling), so every call it makes is one the sequential
  order would allow too.

A node running ahead buffers its events; the runner queues them in its batch when it
reaches the head (and, from then on, flushes whenever the node is about to call out, before
the call is made), then records its completion or failure exactly as for a node executed in
place. The head itself goes to the pool only when some other node runs ahead beside it, or
when a node after it is served at once (a memo hit, a substituted output: a fork tail's
changed worker, then its reused siblings) — then the runner, free during the head's call,
goes on walking the frontier and *predicts* the nodes after it (:meth:`Scheduler.prefetch`:
fingerprints, memo lookups; nothing is started or appended), so the served burst after the
head is a lookup and an event per node. A prediction made ahead is used at the head only
if its execution (occurrence, iteration) and read slice are still the head's, and the
oracle is asked again what it serves (a sweep's shared memo may have changed). Alone, the
head executes in place on the runner's thread (a chain never switches threads). If the run
stops first (a failure, a pause,
a block, a cancellation, a budget), the buffered work of the nodes ahead is dropped: it is
not part of the run the log describes, though the calls it made were made.

**Threads, not asyncio**: providers and tools are synchronous callables (HTTP clients,
user code); a thread pool overlaps their waiting without changing their interface, and the
GIL is released while they wait. The pool is per run and at most ``max_concurrency`` wide.
Only the runner's thread touches the store and the run state; workers touch nothing but
their own buffer (and the oracle's thread-safe parts).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import context as otel_context

from forklab.engine.collector import collector_paused
from forklab.engine.context import Cancelled
from forklab.engine.graph import AgentNode, ApprovalNode, RouterNode, SubgraphNode, ToolNode
from forklab.engine.oracle import NodeCall
from forklab.engine.planner import IterationSeen, ReadsTexts, next_execution, read_slice
from forklab.engine.subgraphs import execution_fingerprint
from forklab.engine.telemetry import node_span

if TYPE_CHECKING:
    from forklab.engine.context import NodeContext, Sink
    from forklab.engine.environment import Environment
    from forklab.engine.graph import GraphSpec
    from forklab.engine.state import RunState
    from forklab.engine.store import Store


class Host(Protocol):
    """What the scheduler needs of the run it serves (``engine.runner.Runner``), named here so
    the scheduler does not import the runner that drives it."""

    graph: GraphSpec
    store: Store
    run_id: str
    env: Environment
    oracle: Any
    state: RunState

    @property
    def logical_clock(self) -> bool: ...
    def context(self, call: NodeCall, tainted: frozenset[str], *, sink: Sink | None = None,
                cancelled: Callable[[], bool] | None = None,
                durable: Callable[[], None] | None = None) -> NodeContext: ...
    def handle(self, ctx: NodeContext, node: Any, substitute: dict[str, Any] | None,
               memo: Any) -> str | None: ...

CALL_DEPARTURE_S = 0.05
"""How long the runner waits at most between looks for a flight to leave its flush point for
its call (:meth:`Scheduler.made_durable`; it is woken as soon as the flight does)."""

BufferedEvent = tuple[type, dict[str, Any], float | None]
"""An event waiting for its seq: class, fields, and its time (None: stamp when appended)."""


@dataclass(slots=True)
class Prediction:
    """What a frontier node's next execution will be (its call once its reads are final),
    and what the scheduler decided about it once (cached: the walk repeats per node)."""

    node: Any
    occurrence: int
    iteration: int
    writes: set[str] | None
    call: NodeCall | None = None
    tainted: frozenset[str] = frozenset()
    instant: bool = False
    memo: Any = None  # the recorded execution the oracle serves the call (not substituted)
    worst: tuple[int | None, float | None] | None = None


@dataclass
class Flight:
    """A node executing on the pool; its events wait here until it is the head."""

    node: Any
    call: NodeCall
    tainted: frozenset[str]
    started_at: float | None
    events: list[BufferedEvent] = field(default_factory=list)
    head: bool = False  # reached the head: before each call it waits for its events to be stored
    emitted: int = 0  # events it has emitted
    drained: int = 0  # of those, how many the runner has taken (folded into its batch)
    durable: int = 0  # of those, how many are stored
    waiting: bool = False  # at the head, about to call out: waiting for a flush
    departed: int = 0  # flush points it has passed (each right before an outside call)
    called_out: bool = False  # it made an outside call (its end is a flush point)
    stores_beside: bool = False  # the runner stores the batch before it during its first call
    eager: bool = False  # its first call goes on without waiting for that (then cleared)
    done: bool = False
    route: str | None = None
    error: BaseException | None = None
    finished_at: float | None = None


def overlapping(width: int, oracle: Any) -> bool:
    """Whether a run may execute nodes at once: more than one at a time allowed, and an
    oracle whose answers take time (``overlaps_calls``: real calls, not lookups)."""
    return width > 1 and bool(getattr(oracle, "overlaps_calls", False))


def potential_writes(node: Any) -> set[str] | None:
    """Every key an execution of ``node`` may write (None for an approval: a barrier, which
    may pause, so nothing is predicted past it whatever it declares)."""
    if isinstance(node, ApprovalNode):
        return None
    keys = set(node.writes)
    if isinstance(node, SubgraphNode):
        keys |= set(node.output)
    return keys


def poolable(node: Any) -> bool:
    """Nodes whose execution may wait on a call: agents, agent routers, read tools."""
    if isinstance(node, AgentNode):
        return True
    if isinstance(node, RouterNode):
        return node.agent is not None
    return isinstance(node, ToolNode) and node.effect == "read"


def barrier(node: Any) -> bool:
    """Nothing starts ahead of these: approvals (they may pause the run), subgraphs and
    write tools (touch the outside world), and every tool — user code, the likeliest node to
    fail the run, and work started ahead of a node that stops the run is work thrown away."""
    return isinstance(node, (ApprovalNode, SubgraphNode, ToolNode))


def _walk_step(node_id: str, iteration: int, ran: set[str], walked: set[str],
               fresh: bool) -> tuple[int, set[str], bool]:
    """One node of a walk over the frontier: the iteration it starts in, the nodes walked in
    that iteration (``node_id`` added) and whether the walk opened that iteration itself. A
    node already started in the current iteration (``ran``, unless the walk opened it) or
    walked past in it opens the next one."""
    if node_id in walked or (not fresh and node_id in ran):
        return iteration + 1, {node_id}, True
    walked.add(node_id)
    return iteration, walked, fresh


class Scheduler:
    """Starts the nodes of one run ahead of its head, up to ``width`` at a time."""

    def __init__(self, runner: Host, width: int) -> None:
        self.runner = runner
        self.width = width
        self.enabled = overlapping(width, runner.oracle)
        self.flights: dict[str, Flight] = {}
        self.seen = IterationSeen()  # the runner's loop shares it (next_execution)
        self.reads_texts = ReadsTexts()  # read slices' texts for the fingerprints predicted
        self.predictions: dict[str, Prediction] = {}
        self.nodes = {node.id: node for node in runner.graph.nodes}
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.changed = False
        self._pool: ThreadPoolExecutor | None = None
        self._prefetching: Iterator[bool] | None = None  # see prefetch

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Stop and wait for the nodes still running ahead (their work is dropped)."""
        self.stop.set()
        with self.cond:
            self.cond.notify_all()  # a head waiting for its append stops (Cancelled)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for flight in self.flights.values():
            settle = getattr(self.runner.oracle, "settle", None)
            if settle is not None:
                settle(flight.call, kept=False)
        self.flights.clear()

    # -- predictions -----------------------------------------------------------------------
    def forget(self, node_id: str) -> None:
        """The node started at the head: its prediction is used up."""
        self.predictions.pop(node_id, None)

    def predict_head(self, node_id: str) -> Prediction:
        """The prediction of the head ``node_id`` (not running ahead), made now: its call is
        final, as nothing runs before it, and what the oracle serves it is what it serves
        now (one made earlier, in a walk, may be stale: a sweep's shared memo changes). Kept
        for the walk (:meth:`launch`) until :meth:`forget`."""
        state = self.runner.state
        occurrence, iteration = next_execution(state, node_id, self.seen)
        p = self.predictions.get(node_id)
        if (p is not None and p.call is not None and p.memo is not None
                and (p.occurrence, p.iteration) == (occurrence, iteration)
                and read_slice(p.node.reads, state.memory) == p.call.reads):
            # made ahead (a walk, a prefetch) and still the head's execution: its call and
            # fingerprint stand; what the oracle serves it is asked again now
            oracle = self.runner.oracle
            if oracle.output(p.call) is None:
                p.memo = oracle.memo(p.call)
                if p.memo is not None:
                    return p
        self.predictions.pop(node_id, None)
        return self._predict(node_id, iteration, set())

    def prefetch(self, flight: Flight, most: int = 256) -> bool:
        """Predict up to ``most`` more nodes of the prefetch walk while ``flight`` (the head)
        waits on its call; False when there is nothing (left) to predict. Stops early when
        the flight waits for a flush or is done, so the runner answers it at once."""
        walk = self._prefetching
        if walk is None:
            return False
        # a bounded pass (``most`` predictions, kept until the burst uses them): the
        # collector waits for its end, as it does across the burst (engine.collector)
        with collector_paused():
            for _ in range(most):
                if flight.waiting or flight.done:
                    return True
                if next(walk, False) is False:
                    self._prefetching = None
                    return False
        return True

    def end_prefetch(self) -> None:
        """The head landed: predictions go on node by node at the head (a burst)."""
        self._prefetching = None

    def _prefetch_walk(self, rest: list[str], iteration: int, ran: set[str], walked: set[str],
                       fresh: bool, unsettled: set[str]) -> Iterator[bool]:
        """The launch walk continued past its lookahead over ``rest`` (the frontier's tail),
        one prediction per step: nothing is started, the predictions are cached for the
        served burst that follows the head (checked again when used: :meth:`predict_head`)."""
        limit = self.runner.graph.max_iterations
        for node_id in rest:
            if self.stop.is_set():
                return
            iteration, walked, fresh = _walk_step(node_id, iteration, ran, walked, fresh)
            if limit is not None and iteration > limit:
                return
            p = self._predict(node_id, iteration, unsettled)
            yield True
            if p.writes is None or barrier(p.node):
                return
            unsettled |= p.writes

    def launch(self, *, opening: bool = False) -> None:
        """Start every node that may run ahead now (the head included), in frontier order.

        ``opening``: the run's state is what it will be once its opening events (a fork's)
        are emitted, and they are not built yet; a head is started only if it calls a
        model, and its first call is made without waiting for anything to be stored
        (``stores_beside``: the opening is stored beside that call)."""
        if not self.enabled or self.stop.is_set():
            return
        state, limit = self.runner.state, self.runner.graph.max_iterations
        if state.current is None and not self.flights and len(state.frontier) == 1:
            # the head alone (a chain): nothing could run beside it, so it executes in place
            # and computes its own call — walking here would only predict that call
            return
        # the iteration each node starts in: a node already started in it (``ran``, not
        # copied: a fan-out's iteration holds N nodes) or walked past opens the next one
        iteration, ran, fresh = state.iteration, self.seen(state), False
        walked: set[str] = set()
        unsettled: set[str] = set()
        pending_calls: int | None = 0
        pending_usd: float | None = 0.0
        at_head = state.current is None
        if state.current is not None:  # the head is still running: everything else is ahead
            current = state.current
            node = self.nodes[current.node]
            writes = potential_writes(node)
            if barrier(node) or writes is None:
                return
            unsettled |= writes
            pending_calls, pending_usd = self._worst(node, NodeCall(
                node=current.node, kind=current.kind, occurrence=current.occurrence,
                iteration=current.iteration, fingerprint=current.fingerprint,
                reads=current.reads))
        lookahead = 2 * self.width + 4
        # the head (node, call, taint), started on the pool only when another node runs too
        head: tuple[Any, NodeCall, frozenset[str]] | None = None
        for position, node_id in enumerate(state.frontier[:lookahead]):
            if len(self.flights) >= self.width and node_id not in self.flights:
                break
            # the iteration this node starts in follows from the starts before it
            iteration, walked, fresh = _walk_step(node_id, iteration, ran, walked, fresh)
            if limit is not None and iteration > limit:
                break
            p = self._predict(node_id, iteration, unsettled)
            if at_head and position == 0 and (p.instant or (
                    opening and isinstance(p.node, ToolNode))):
                # served at once (a memo hit, a substituted output): the walk waits for the
                # next node boundary, microseconds away — a fork tail of N reused nodes does
                # not walk the lookahead N times (and a tool is never started before the
                # run's opening is stored: it is user code, not a model call)
                return
            if head is not None and p.instant and not self.flights:
                # served at once after a head that calls out (a fork tail: the changed
                # worker, then its reused siblings): the head's call runs on the pool now,
                # and the runner predicts the rest of the walk meanwhile (fingerprints, memo
                # lookups; :meth:`prefetch`), so the burst that serves them once the head
                # has landed is a lookup and an event per node. The next walks (the runner
                # calls :meth:`launch` while the head runs) start what may run ahead.
                self._start(*head, head=True, stores_beside=opening)
                if p.writes is not None and not barrier(p.node):
                    self._prefetching = self._prefetch_walk(
                        state.frontier[position + 1:], iteration, set(ran), walked, fresh,
                        unsettled | p.writes)
                return
            worst = p.worst if p.worst is not None else self._worst(p.node, p.call)
            if (p.call is not None and node_id not in self.flights and not p.instant
                    and poolable(p.node)):
                if at_head and position == 0:
                    head = (p.node, p.call, p.tainted)
                elif self._admits(pending_calls, pending_usd, worst):
                    if head is not None:  # not alone: the head runs on the pool too, first
                        self._start(*head, head=True, stores_beside=opening)
                        head = None
                    self._start(p.node, p.call, p.tainted, head=False)
            if p.writes is None or barrier(p.node):
                break
            unsettled |= p.writes
            pending_calls = None if pending_calls is None or worst[0] is None \
                else pending_calls + worst[0]
            pending_usd = None if pending_usd is None or worst[1] is None \
                else pending_usd + worst[1]
        if head is not None and self.flights:  # others still run: keep the runner free to refill
            self._start(*head, head=True, stores_beside=opening)

    def _predict(self, node_id: str, iteration: int, unsettled: set[str]) -> Prediction:
        state = self.runner.state
        p = self.predictions.get(node_id)
        if p is None:
            node = self.nodes[node_id]
            p = Prediction(node=node, occurrence=state.occurrences.get(node_id, 0) + 1,
                           iteration=iteration, writes=potential_writes(node))
            self.predictions[node_id] = p
        if p.call is None and not unsettled.intersection(p.node.reads):
            # final: nothing before it may write what it reads
            reads = read_slice(p.node.reads, state.memory)
            fp = execution_fingerprint(self.runner.graph, self.runner.store, node_id, reads,
                                       occurrence=p.occurrence, iteration=p.iteration,
                                       reads_text=self.reads_texts(reads))
            p.call = NodeCall(node=node_id, kind=p.node.kind, occurrence=p.occurrence,
                              iteration=p.iteration, fingerprint=fp, reads=reads)
            p.tainted = frozenset(state.taint.intersection(reads))  # keys read and tainted
            # served without a call (a substituted output, a memo hit): run at the head
            oracle = self.runner.oracle
            p.instant = oracle.output(p.call) is not None
            if not p.instant:
                p.memo = oracle.memo(p.call)
                p.instant = p.memo is not None
            p.worst = self._served(p.call) if p.instant else self._worst(p.node, p.call)
        return p

    def _served(self, call: NodeCall) -> tuple[int | None, float | None]:
        """What a node served at once reserves: nothing, unless the oracle counts it against
        a budget (a fork served a sweep sibling's execution of a call it would have paid)."""
        served = getattr(self.runner.oracle, "served_worst", None)
        return (0, 0.0) if served is None else served(call)

    def _worst(self, node: Any, call: NodeCall | None) -> tuple[int | None, float | None]:
        worst = getattr(self.runner.oracle, "worst_case", None)
        return (0, 0.0) if worst is None else worst(self.runner.graph, node, call)

    def _admits(self, calls: int | None, usd: float | None,
                worst: tuple[int | None, float | None]) -> bool:
        admits: Callable[..., bool] | None = getattr(self.runner.oracle, "admits", None)
        if admits is None:
            return True
        total_calls = None if calls is None or worst[0] is None else calls + worst[0]
        total_usd = None if usd is None or worst[1] is None else usd + worst[1]
        return admits(total_calls, total_usd)

    # -- flights ---------------------------------------------------------------------------
    def start_beside_flush(self, call: NodeCall, tainted: frozenset[str]) -> Flight | None:
        """Start the head ``call`` (a model-calling node, nothing else running) on the pool
        so that its call is made while the runner stores the open batch before it (the
        runner's ``_land``); None when the scheduler is off or the node does not call a
        model."""
        node = self.nodes[call.node]
        if (not self.enabled or self.flights
                or not (poolable(node) and not isinstance(node, ToolNode))):
            return None
        self._start(node, call, tainted, head=True, stores_beside=True)
        return self.flights[call.node]

    def _start(self, node: Any, call: NodeCall, tainted: frozenset[str], *, head: bool,
               stores_beside: bool = False) -> None:
        runner = self.runner
        started_at = None if runner.logical_clock else round(runner.env.clock(), 6)
        flight = Flight(node=node, call=call, tainted=tainted, started_at=started_at, head=head,
                        stores_beside=stores_beside, eager=stores_beside)
        self.flights[call.node] = flight
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.width,
                                            thread_name_prefix=f"forklab-{runner.run_id[:8]}")
        self._pool.submit(self._fly, flight, otel_context.get_current())

    def _fly(self, flight: Flight, parent: Any) -> None:
        """Worker thread: execute the node into its buffer; never touches the run state."""
        token = otel_context.attach(parent)
        runner = self.runner
        try:
            if self.stop.is_set():
                raise Cancelled()
            with node_span(flight.node.kind, flight.call.node, runner.run_id):
                ctx = runner.context(flight.call, flight.tainted, sink=self._sink(flight),
                                     cancelled=self.stop.is_set,
                                     durable=self._durable(flight))
                flight.route = runner.handle(ctx, flight.node, None, None)
        except BaseException as exc:  # an outcome, recorded when the node reaches the head
            flight.error = exc
        finally:
            otel_context.detach(token)
            with self.cond:
                flight.finished_at = None if runner.logical_clock else round(runner.env.clock(), 6)
                flight.done = True
                self.changed = True
                self.cond.notify_all()

    def _sink(self, flight: Flight) -> Callable[[type, dict[str, Any]], None]:
        """Where a flight's events go: its buffer (the runner takes them when it is the head)."""
        logical, clock = self.runner.logical_clock, self.runner.env.clock

        def buffer(cls: type, fields: dict[str, Any]) -> None:
            at = None if logical else round(clock(), 6)
            with self.cond:
                if self.stop.is_set():
                    raise Cancelled()
                flight.events.append((cls, fields, at))
                flight.emitted += 1
                self.changed = True
                self.cond.notify_all()

        return buffer

    def _durable(self, flight: Flight) -> Callable[[], None]:
        """A flight's flush point, right before it calls out. At the head it waits until the
        runner has stored everything it emitted, as a node executed in place does — so a
        process that dies after a call was recorded never pays it again on resume. Ahead of
        the head it goes on at once: its events have no place in the log yet."""

        def durable() -> None:
            with self.cond:
                flight.called_out = True
                if flight.eager:  # its start and request are stored beside the call
                    flight.eager = False
                    flight.departed += 1
                    self.cond.notify_all()
                    return
                if not flight.head or flight.durable >= flight.emitted:
                    return
                flight.waiting = True
                self.changed = True
                self.cond.notify_all()
                while flight.durable < flight.emitted:
                    self.cond.wait()
                    if self.stop.is_set():
                        raise Cancelled()
                flight.departed += 1
                self.cond.notify_all()

        return durable

    def reach_head(self, flight: Flight) -> None:
        """``flight`` is now the head: its next call waits for its events to be stored."""
        with self.cond:
            flight.head = True

    def drain(self, flight: Flight) -> tuple[list[BufferedEvent], bool, bool]:
        """The events ``flight`` buffered since the last drain, whether it is done, and
        whether it waits for them to be stored (it is about to call out)."""
        with self.cond:
            events, flight.events = flight.events, []
            flight.drained += len(events)
            return events, flight.done, flight.waiting

    def made_durable(self, flight: Flight) -> None:
        """The runner stored every event drained so far: a waiting flight may call out once
        that is every event it emitted.

        Releasing a flight, it returns once the flight has left its flush point for its
        call (or ended, or the scheduler stops): the runner's next work — walks,
        predictions, a burst — holds the GIL for milliseconds, and a woken worker waits out the
        interpreter's switch interval (5 ms) for it before it can even start the call it
        waited for. Blocked here, the runner lets the worker run to its call, which
        releases the GIL within microseconds.

        A flight stored beside its call is made durable without waiting, so it may have
        come back and reached its next flush point since the runner's drain, with events
        the runner has not taken: it stays waiting (the runner's next drain sees that and
        stores them). Released on the stale drain, it would wait for them forever, and the
        runner for its departure.
        """
        with self.cond:
            flight.durable = flight.drained
            released = flight.waiting and flight.durable >= flight.emitted
            departed = flight.departed
            if released:
                flight.waiting = False
            self.cond.notify_all()
            if released:
                self._await_departure(flight, departed)

    def await_first_call(self, flight: Flight) -> None:
        """Until ``flight`` (started to call while the runner stores the batch before it:
        ``stores_beside``) has left for its first call, or ended: the store's encoding
        holds the GIL for milliseconds, and the flight preparing its request beside it
        would wait out the switch interval for it (see :meth:`made_durable`)."""
        with self.cond:
            self._await_departure(flight, 0)

    def _await_departure(self, flight: Flight, departed: int) -> None:
        """Wait (holding ``cond``) until the flight passed a flush point after ``departed``,
        ended, waits at a flush point again, or the scheduler stops."""
        while (flight.departed == departed and not flight.done and not flight.waiting
               and not self.stop.is_set()):
            self.cond.wait(CALL_DEPARTURE_S)

    def wait(self, flight: Flight, timeout: float) -> None:
        """Until ``flight`` buffers or finishes, another flight finishes, or ``timeout``."""
        with self.cond:
            if not self.changed and not flight.events and not flight.done:
                self.cond.wait(timeout)
            self.changed = False


__all__ = ["Flight", "Prediction", "Scheduler", "barrier", "overlapping", "poolable",
           "potential_writes"]
