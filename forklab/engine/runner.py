"""The live runner: executes a graph, appending every transition to the event log.

Each event is folded into the runner's state as it is made, through the same ``evolve`` the
fold uses, and queued in the runner's open batch; a *flush* appends the batch to the store in
one call (one transaction, ``expected_seq`` = the seq before its first event) and only then
hands its events to ``on_event``. So the live state always equals the fold of the log plus
the open batch, and at every flush it equals the fold of the log.

Flush points (what keeps crash semantics honest):
- right before every outside call — a model, a tool, a human, a child run
  (``NodeContext.before_call``): what led to the call is stored before it is made, and the
  result of every earlier call with it, so a resume never pays a stored call again.
  One exception, for a model call at the head (``_before_model_call``): when the open batch
  holds no result of an earlier call (only this node's start and request, and nodes that
  called nothing), was opened less than ``FAST_CALL_S`` ago, and the run's previous model
  or tool call returned within ``FAST_CALL_S``, the flush waits for the node's end — one
  transaction per node instead of two when calls are fast (a local or scripted model). A
  crash during such a call loses only its start and request: the call is made again on
  resume, as it would be after a node.interrupted. A slow call (any real provider) is
  flushed before as always, so a viewer sees a running node's request during its call.
  A second exception, for a model-calling head whose open batch holds ``STORE_BESIDE_MIN``
  events or more (a served burst before it: at a node boundary the batch never holds the
  result of a paid call, which is stored at its node's end): the node runs on the pool and
  makes its first call while the runner stores the batch and its start, then its request
  as soon as it is made — the call no longer waits for the burst's transaction. A crash
  during that call loses at most the served nodes (re-derived on resume, nothing paid) and
  the node's start and request: its call is made again, as in the first exception. So is a
  call that *completed* before the burst's transaction, the start and the request were
  stored (its result is stored at the node's end, after them): that one call is paid
  twice, nothing else (docs/forking.md; a ``store_beside_min`` no batch reaches turns this off).
  A fork's first model call is made the same way before its opening is even built
  (:meth:`Runner.launch_opening`): the opening is stored beside it, with the same cost;
- at the end of a node that called out (its result and ``node.completed`` are stored before
  the next node starts), and when the run stops (end, pause, failure, cancellation);
- at a node boundary once the batch holds ``batch_limit`` events (``BATCH_MAX``).
Nodes that call nothing (memo hits in a fork tail, substituted outputs, rules routers) are
folded and queued only: a run of them costs lookups and events, one transaction per batch,
and the durable log still ends at a node boundary. ``batch_limit = 1`` appends every event
as it is made (the fold-invariant test watches the live state after each one).

A crash loses only the open batch: whole nodes that called nothing (a resume serves or
re-derives them), the start and request of a fast model call in flight (above) and, of a
node that called out, at most what it emitted after its last call returned — its result, if the process dies in the microseconds between the call
returning and the node's end; that call is paid again on resume, as it would be if the
process died during the call.
Node failures become ``node.failed`` + ``run.failed``
events; only integrity violations (a seq conflict: someone else wrote this run) escape.

Control flow: ``start`` / ``resume`` / ``answer`` enter ``_loop``, which asks the planner for
the next node until the frontier is empty, the run pauses at a human gate, the side-effect
guard blocks it, a node fails, or the cancel token is set. Before each node the
:class:`~forklab.engine.scheduler.Scheduler` starts independent ready nodes ahead on a thread
pool; the node at the head either ran ahead (``_land``: its buffered events are queued) or
executes in place (``_execute``). Either way its events land between its ``node.started`` and
its ``node.completed`` in frontier order, so the log is the sequential one. Only this thread
touches the store and the state; handlers get a :class:`~forklab.engine.context.NodeContext`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from forklab.engine import nodes
from forklab.engine.answers import check_answer
from forklab.engine.collector import collector_paused
from forklab.engine.context import Cancelled, NodeContext, Sink
from forklab.engine.environment import Environment
from forklab.engine.errors import RunStateError
from forklab.engine.events import (
    REPLAY_VERSION,
    EffectSuppressed,
    Event,
    HumanAnswered,
    NodeCompleted,
    NodeFailed,
    NodeInterrupted,
    NodeStarted,
    RunBlocked,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
)
from forklab.engine.graph import END, GraphSpec
from forklab.engine.inputs import check_json_value
from forklab.engine.memoized import replay_memo, reused_event, served_route
from forklab.engine.oracle import (
    Blocked,
    BudgetExceeded,
    HumanAnswer,
    LiveOracle,
    NodeCall,
    NodeFailure,
    Oracle,
    Paused,
    ResumeOracle,
)
from forklab.engine.planner import (
    next_execution,
    next_node,
    read_slice,
    successors,
)
from forklab.engine.reducers import evolve, fold
from forklab.engine.scheduler import BufferedEvent, Flight, Scheduler
from forklab.engine.state import RunState
from forklab.engine.status import RunKind
from forklab.engine.store import Store, graph_hash
from forklab.engine.subgraphs import execution_fingerprint
from forklab.engine.telemetry import node_span, tracer

log = logging.getLogger("forklab.engine.runner")

CANCEL_POLL_S = 0.25
"""How often the runner asks the cancel token while the head node runs on the pool."""

BATCH_MAX = 1000
"""Events an open batch may hold before it is appended (checked at node boundaries)."""

FAST_CALL_S = 0.005
"""A model call's start and request may wait for the node's end (one transaction per node)
when the run's previous call returned within this and the open batch is younger; a viewer
then sees a running node at most about this late. 0 stores every request before its call."""


STORE_BESIDE_MIN = 64
"""A model-calling head whose open batch holds at least this many events (served nodes: at
a node boundary the batch never holds a paid result) makes its call on the pool while the
runner stores the batch, instead of after; see the flush points above."""


class CancelToken:
    """Set from any thread; the runner stops at the next node boundary or call."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


class Runner:
    """Runs one run of ``graph`` into ``store`` under ``run_id``."""

    def __init__(
        self,
        graph: GraphSpec,
        *,
        store: Store,
        run_id: str,
        env: Environment | None = None,
        oracle: Oracle | None = None,
        hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None = None,
        cancel: CancelToken | None = None,
        on_event: Callable[[Event], None] | None = None,
        graph_version: int | None = None,
    ) -> None:
        self.graph = graph
        self.store = store
        self.run_id = run_id
        self.env = env or Environment()
        self.oracle: Oracle = oracle or LiveOracle(self.env, hitl)
        self.cancel = cancel or CancelToken()
        self.on_event = on_event
        self.graph_version = graph_version
        self.state = RunState()
        self.batch_limit = BATCH_MAX  # 1: append every event as it is made
        self.fast_call_s = FAST_CALL_S  # 0: flush before every model call too
        self.store_beside_min = STORE_BESIDE_MIN  # see STORE_BESIDE_MIN
        self._batch: list[Event] = []  # events folded but not yet appended, in seq order
        self._batch_opened = 0.0  # time.monotonic() when the open batch got its first event
        self._called_out = False  # the node at the head made an outside call: flush at its end
        self._call_began: float | None = None  # monotonic start of the call in flight
        self._last_call_s: float | None = None  # how long the run's previous call took
        self.ancestry: tuple[str, ...] = ()  # graphs of the runs this child run nests in
        self._scheduler: Scheduler | None = None  # made by launch_opening, for the loop

    one_event_reuse = True
    """Serve a completed memo hit as one ``node.reused`` event; False writes the multi-event
    form (``node.started``, the re-emitted actions, writes, ``node.completed``) that logs
    recorded before it hold — kept so tests can compare the two folds."""

    # -- the log -------------------------------------------------------------------------
    def emit(self, cls: type[Event], *, at: float | None = None, **fields: Any) -> Event:
        """Fold one event (seq = the state's version + 1) into the state and queue it in the
        open batch; it is appended — and handed to ``on_event`` — at the next flush."""
        # microsecond precision: what the wire form (ISO time) keeps, so a log read back from
        # a durable store folds to exactly the state the runner had
        at = round(self.env.clock(), 6) if at is None else at
        return self._queue(cls(run_id=self.run_id, seq=self.state.version + 1, at=at, **fields))

    def _queue(self, event: Event) -> Event:
        """Fold ``event`` (built at the state's version + 1) and queue it (see :meth:`emit`)."""
        evolve(self.state, event)
        if self._call_began is not None:  # the first event after a call: it has returned
            self._last_call_s = time.monotonic() - self._call_began
            self._call_began = None
        if not self._batch:
            self._batch_opened = time.monotonic()
        self._batch.append(event)
        if self.batch_limit <= 1:
            self.flush()
        return event

    def flush(self) -> None:
        """Append the open batch in one store call (one transaction), then hand its events
        to ``on_event``. The batch is emptied first: a failed append (a seq conflict, a lost
        lease) is never retried — this runner's view of the log is wrong and it stops."""
        batch, self._batch = self._batch, []
        if not batch:
            return
        self.store.append(self.run_id, batch, expected_seq=batch[0].seq - 1)
        if self.on_event is not None:
            for event in batch:
                self.on_event(event)

    def _idle(self) -> None:
        """The runner has nothing to do until a node on the pool moves: the store may do
        deferred upkeep now (``idle``, optional: SQLite checkpoints its WAL)."""
        idle = getattr(self.store, "idle", None)
        if idle is not None:
            idle()

    def _before_call(self) -> None:
        """The head node is about to call out: store everything so far (a flush point)."""
        self._called_out = True
        self.flush()
        self._call_began = time.monotonic()

    def _before_model_call(self) -> None:
        """The head node is about to call a model: store everything so far, unless nothing
        in the batch is a paid result, the batch is young and the run's calls are fast —
        then the node's end stores its start, request and result in one transaction."""
        now = time.monotonic()
        fast = self._last_call_s is not None and self._last_call_s < self.fast_call_s
        if (self._called_out or not fast or self.batch_limit <= 1
                or now - self._batch_opened >= self.fast_call_s):
            self._before_call()
            return
        self._called_out = True  # its result is paid: stored at the node's end at the latest
        self._call_began = now

    def _boundary(self) -> None:
        """A node is about to start: flush a batch that has grown to ``batch_limit``."""
        self._called_out = False
        if len(self._batch) >= self.batch_limit:
            self.flush()

    def _node_end(self) -> None:
        """The head node ended: a node that called out is stored whole before the next."""
        if self._called_out:
            self._called_out = False
            self.flush()

    def append_buffered(self, batch: list[BufferedEvent]) -> None:
        """Fold and queue events a node buffered while it ran, in their order.

        An event without a time (a logical clock) is stamped now, in log order, so a
        logical clock gives the same stamps whatever the concurrency."""
        for cls, fields, at in batch:
            self.emit(cls, at=round(self.env.clock(), 6) if at is None else at, **fields)

    @property
    def logical_clock(self) -> bool:
        """A clock that counts readings (``FixedClock``) rather than telling time: read only
        in log order, when an event is appended, never from a worker thread."""
        return bool(getattr(self.env.clock, "logical", False))

    @property
    def max_concurrency(self) -> int:
        """How many nodes may execute at once: the graph's setting, else the environment's."""
        return self.graph.max_concurrency or self.env.max_concurrency

    # -- node contexts ---------------------------------------------------------------------
    def context(self, call: NodeCall, tainted: frozenset[str], *, sink: Sink | None = None,
                cancelled: Callable[[], bool] | None = None,
                durable: Callable[[], None] | None = None) -> NodeContext:
        """The narrow context a handler of ``call`` runs with (``sink``: the log itself)."""
        return NodeContext(graph=self.graph, call=call, run_id=self.run_id, env=self.env,
                           oracle=self.oracle, tainted=tainted,
                           sink=sink or self._append_fields,
                           cancelled=cancelled or (lambda: self.cancel.cancelled),
                           durable=durable or self._before_call,
                           children=self if sink is None else None,
                           before_model_call=self._before_model_call if durable is None
                           else None)

    def _append_fields(self, cls: type[Event], fields: dict[str, Any]) -> None:
        self.emit(cls, **fields)

    @staticmethod
    def handle(ctx: NodeContext, node: Any, substitute: dict[str, Any] | None,
               memo: Any) -> str | None:
        """Execute one node (or serve it): its route; raises what stops the node."""
        if substitute is not None:
            return nodes.substitute_output(ctx, node, substitute)
        if memo is not None:
            return replay_memo(ctx, memo)
        return nodes.execute(ctx, node)

    # -- child runs (what a subgraph node's context may do) ---------------------------------
    def child_graph(self, graph_id: str) -> GraphSpec:
        nesting = (*self.ancestry, self.graph.id)
        if graph_id in nesting:  # a graph running itself would nest child runs forever
            raise NodeFailure("subgraph_cycle", f"a subgraph node would run graph "
                              f"{graph_id!r} inside itself ({' > '.join(nesting)})")
        return self.store.load_graph(graph_id)

    def run_child(self, graph: GraphSpec, *, child_id: str, oracle: Oracle,
                  input: dict[str, Any], tainted_input: list[str]) -> RunState:
        child = Runner(graph, store=self.store, run_id=child_id, env=self.env, oracle=oracle,
                       cancel=self.cancel, on_event=self.on_event)
        child.ancestry = (*self.ancestry, self.graph.id)
        child.batch_limit, child.fast_call_s = self.batch_limit, self.fast_call_s
        return child.start(input, run_kind=RunKind.SUBGRAPH, parent_run_id=self.run_id,
                           tainted_input=tainted_input)

    # -- entry points --------------------------------------------------------------------
    def start(
        self, input: dict[str, Any], *, run_kind: RunKind = RunKind.PRIMARY, label: str = "",
        parent_run_id: str | None = None, tainted_input: list[str] | None = None,
    ) -> RunState:
        """Record ``run.started`` and run to the end (or a gate). ``tainted_input`` names the
        input keys that start tainted (a child run fed from tainted keys)."""
        check_json_value(input, where="input")  # refused before anything is appended
        with collector_paused():  # whole-graph passes (serialise, store, hash): bounded
            version = self.graph_version or self.store.save_graph(self.graph)
            content_hash = graph_hash(self.graph)
        self.graph_version = version
        self.emit(RunStarted, graph_id=self.graph.id, graph_version=version,
                  graph_hash=content_hash, input=dict(input), start=self.graph.start,
                  run_kind=run_kind, replay_version=REPLAY_VERSION, label=label,
                  parent_run_id=parent_run_id, tainted_input=sorted(tainted_input or []))
        return self._loop()

    def resume(self) -> RunState:
        """Rebuild from the log and continue from the last node boundary.

        A node the process died inside is marked ``node.interrupted`` (its buffered writes
        are dropped) and re-executed; whatever it had already recorded is served back.
        """
        self.state = fold(self.store.read(self.run_id))
        if self.state.finished or self.state.status == "paused":
            return self.state
        if self.state.current is not None:
            self.emit(NodeInterrupted, node=self.state.current.node,
                      occurrence=self.state.current.occurrence,
                      iteration=self.state.current.iteration,
                      reason="the process stopped inside this node; re-executing it")
        if self.state.interrupted:
            self.oracle = ResumeOracle(self.oracle, self.state.interrupted)
        return self._loop()

    def answer(self, answer: HumanAnswer) -> RunState:
        """Answer the approval gate a paused run waits at, then continue.

        An answer whose memory updates set a key the gate does not declare is refused
        (``invalid_overrides``) before anything is recorded: the run stays paused."""
        if not self.state.version:
            self.state = fold(self.store.read(self.run_id))
        current = self.state.current
        if self.state.status != "paused" or current is None:
            raise RunStateError(
                f"run {self.run_id!r} is {self.state.status}, not paused at an approval gate; "
                "only a paused run can be answered",
                run_id=self.run_id, status=self.state.status,
            )
        node = self.graph.node(current.node)
        check_answer(node, answer.memory_updates)  # type: ignore[arg-type]
        pending = self.state.pending_human or {}
        if pending.get("call") is not None:
            return self._answer_call(pending["call"], answer)
        call = NodeCall(node=current.node, kind=current.kind, occurrence=current.occurrence,
                        iteration=current.iteration, fingerprint=current.fingerprint,
                        reads=current.reads)
        ctx = self.context(call, frozenset(k for k in call.reads if k in self.state.taint))
        route = nodes.finish_approval(ctx, node, answer)  # type: ignore[arg-type]
        self._settle(call)
        self._complete(current.node, route)
        return self._loop()

    def _answer_call(self, key: str, answer: HumanAnswer) -> RunState:
        """Answer a tool call's gate inside an agent node (SPEC §6.3): the node is
        re-executed with everything it recorded served back and this answer at its gate,
        as a resumed node is (``node.interrupted``, then the node again)."""
        current = self.state.current
        assert current is not None
        self.emit(NodeInterrupted, node=current.node, occurrence=current.occurrence,
                  iteration=current.iteration,
                  reason=f"answered at the gate of call {key!r}; re-executing the node with "
                         "its recorded calls served")
        self.oracle = ResumeOracle(self.oracle, [current],
                                   answers={(current.node, current.occurrence, key): answer})
        return self._loop()

    def resume_loop(self) -> RunState:
        """Continue from the current in-memory state (after a fork's opening events)."""
        return self._loop()

    def launch_opening(self, opened: RunState) -> None:
        """Start on the pool what may run ahead of the run's opening events, which the caller
        is about to build and emit (a fork's: its graph hashed, its prefix and changes
        recorded): ``opened`` is the state they fold to. A head that calls a model makes
        its call meanwhile, and its events land after the opening's when the loop reaches
        it (:meth:`resume_loop`), checked against the state the opening really folded to.
        Like a head stored beside its call (see the flush points), a crash during that call
        loses it (it is made again), and one that completed before the opening was stored
        is paid twice — that one call, nothing else."""
        scheduler = self._scheduler = Scheduler(self, self.max_concurrency)
        self.state, real = opened, self.state  # what the scheduler predicts from, meanwhile
        try:
            scheduler.launch(opening=True)
        finally:
            self.state = real

    def drop_launched(self) -> None:
        """The opening :meth:`launch_opening` ran ahead of was never emitted (building it
        raised): stop what was started, wait for it and drop its work, as a run that stops
        does (``Scheduler.close``)."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.close()

    # -- the loop ------------------------------------------------------------------------
    def _loop(self) -> RunState:
        with tracer.start_as_current_span("workflow.run", attributes={
            "run.id": self.run_id, "run.kind": self.state.run_kind, "graph.id": self.graph.id,
        }):
            try:
                return self._drive()
            finally:
                self.flush()

    def _drive(self) -> RunState:
        scheduler = self._scheduler or Scheduler(self, self.max_concurrency)
        self._scheduler = None
        try:
            while self.state.status == "running":
                if self.cancel.cancelled:
                    self.emit(RunCancelled, reason="cancelled by request")
                    break
                node_id = next_node(self.state)
                if node_id is None:
                    self.emit(RunCompleted)
                    break
                if self._serve_burst(node_id, scheduler):
                    continue
                scheduler.launch()
                flight = scheduler.flights.get(node_id)
                if flight is not None:
                    self._land(scheduler, flight)
                    continue
                call = self._head_call(node_id, scheduler)
                if call is None:  # beyond max_iterations: the run failed
                    continue
                substitute = self.oracle.output(call)  # both are lookups: nothing runs yet
                memo = None if substitute is not None else self.oracle.memo(call)
                if memo is not None and memo.status == "completed" and self.one_event_reuse:
                    self._reuse(call, memo)  # no span, no context: one event
                    continue
                if (substitute is None and memo is None
                        and len(self._batch) >= self.store_beside_min):
                    flight = scheduler.start_beside_flush(call, frozenset(
                        k for k in call.reads if k in self.state.taint))
                    if flight is not None:  # its call is made while the batch is stored
                        self._land(scheduler, flight)
                        continue
                with node_span(call.kind, node_id, self.run_id):
                    self._execute(call, substitute, memo)
        finally:
            scheduler.close()
        return self.state

    def _serve_burst(self, node_id: str, scheduler: Scheduler) -> bool:
        """Serve the head ``node_id`` and the heads after it while each is a completed memo
        hit, each as one ``node.reused`` event; False (nothing done) when the head is not one.

        No scheduler walk: a walk stops at a head served at once, so none could start a node
        ahead of it. The collector is paused across the burst: serving calls nothing, so it
        is a bounded pass building long-lived state (``engine.collector``), and a fork tail
        of N served nodes would otherwise run tens of collections over what it builds."""
        served = self._served_head(node_id, scheduler)
        if served is None:
            return False
        with collector_paused():
            while served is not None:
                self._reuse(*served)
                head = next_node(self.state)
                if head is None or self.state.status != "running" or self.cancel.cancelled:
                    break
                served = self._served_head(head, scheduler)
        return True

    def _served_head(self, node_id: str, scheduler: Scheduler) -> tuple[NodeCall, Any] | None:
        """(call, recorded execution) when the head ``node_id`` is served whole now: a
        completed memo hit within ``max_iterations``, the one-event form on."""
        if not self.one_event_reuse or node_id in scheduler.flights:
            return None
        p = scheduler.predict_head(node_id)
        limit = self.graph.max_iterations
        if (p.call is None or p.memo is None or p.memo.status != "completed"
                or (limit is not None and p.iteration > limit)):
            return None
        scheduler.forget(node_id)
        return p.call, p.memo

    def _head_call(self, node_id: str, scheduler: Scheduler) -> NodeCall | None:
        """The execution of the head node (from the scheduler's prediction when it made one),
        or None after failing the run when it would start beyond ``max_iterations``."""
        occurrence, iteration = next_execution(self.state, node_id, scheduler.seen)
        limit = self.graph.max_iterations
        if limit is not None and iteration > limit:
            self.emit(RunFailed, error={
                "code": "loop_limit", "node": node_id,
                "message": f"node {node_id!r} would start iteration {iteration}, beyond "
                           f"max_iterations={limit}",
            })
            return None
        predicted = scheduler.predictions.get(node_id)
        scheduler.forget(node_id)
        if predicted is not None and predicted.call is not None:
            return predicted.call
        node = self.graph.node(node_id)
        reads = read_slice(node.reads, self.state.memory)
        fp = execution_fingerprint(self.graph, self.store, node_id, reads,
                                   occurrence=occurrence, iteration=iteration)
        return NodeCall(node=node_id, kind=node.kind, occurrence=occurrence,
                        iteration=iteration, fingerprint=fp, reads=reads)

    def _reuse(self, call: NodeCall, recorded: Any) -> None:
        """Serve the head node its completed recorded execution as one ``node.reused`` event
        (docs/forking.md#served-nodes-one-nodereused-event): a lookup and an appended
        event, nothing run."""
        node = self.graph.node(call.node)
        self._boundary()
        tainted = not self.state.taint.isdisjoint(call.reads)
        ready, waiting = successors(self.graph, self.state, call.node,
                                    served_route(node, recorded))
        self._settle(call)
        seq = self.state.version + 1  # the records carry the event's seq (the fold shares them)
        self._queue(reused_event(self.run_id, seq, round(self.env.clock(), 6), call, node,
                                 tainted, recorded, ready, waiting))

    def _execute(self, call: NodeCall, substitute: dict[str, Any] | None, memo: Any) -> None:
        """Execute the head node in place, its events queued as they happen (see flush points)."""
        node = self.graph.node(call.node)
        self._boundary()
        self.emit(NodeStarted, node=call.node, occurrence=call.occurrence,
                  iteration=call.iteration, kind=node.kind, fingerprint=call.fingerprint,
                  reads=call.reads)
        ctx = self.context(call, frozenset(k for k in call.reads if k in self.state.taint))
        try:
            route = self.handle(ctx, node, substitute, memo)
        except Exception as exc:
            self._finish(call, None, exc)
            return
        self._finish(call, route, None, memo=memo is not None)
        self._node_end()

    def _land(self, scheduler: Scheduler, flight: Flight) -> None:
        """The head ran ahead on the pool: queue its buffered events (flushing whenever it
        waits to call out), then record how it ended, exactly as for a node executed in
        place."""
        call = flight.call
        occurrence, iteration = next_execution(self.state, call.node, scheduler.seen)
        if (occurrence, iteration) != (call.occurrence, call.iteration) or \
                read_slice(flight.node.reads, self.state.memory) != call.reads:
            raise AssertionError(f"node {call.node!r} ran ahead on a prediction the log no "
                                 "longer matches (a scheduler bug)")
        scheduler.forget(call.node)
        self._boundary()
        self.append_buffered([(NodeStarted, {
            "node": call.node, "occurrence": occurrence, "iteration": iteration,
            "kind": call.kind, "fingerprint": call.fingerprint, "reads": call.reads,
        }, flight.started_at)])
        scheduler.reach_head(flight)  # from now on it waits for a flush before each call
        if flight.stores_beside:  # the batch before it (served nodes), stored during its call
            scheduler.await_first_call(flight)
            self.flush()
        polled = time.monotonic()
        while True:
            events, done, waiting = scheduler.drain(flight)
            self.append_buffered(events)
            if waiting or (flight.stores_beside and events and flight.called_out
                           and not done):
                # about to call out: store what it emitted first (or, beside its first
                # call, its request as soon as it is made: a viewer sees it during the call)
                self.flush()
                scheduler.made_durable(flight)
            if done:
                break
            scheduler.launch()
            if not scheduler.prefetch(flight):  # nothing to prepare meanwhile: wait
                self._idle()
                scheduler.wait(flight, timeout=CANCEL_POLL_S)
            if time.monotonic() - polled >= CANCEL_POLL_S:  # a token may ask a database
                polled = time.monotonic()
                if self.cancel.cancelled:
                    scheduler.stop.set()  # workers check it before each call
        scheduler.flights.pop(call.node, None)
        scheduler.end_prefetch()
        self._called_out = flight.called_out
        self._finish(call, flight.route, flight.error, finished_at=flight.finished_at)
        if flight.error is None:
            self._node_end()

    def _finish(self, call: NodeCall, route: str | None, error: BaseException | None, *,
                memo: bool = False, finished_at: float | None = None) -> None:
        """Record how the head node ended: completed (with its route) or what stopped it."""
        node_id = call.node
        self._settle(call)
        match error:
            case None:
                self._complete(node_id, route, memo=memo, finished_at=finished_at)
            case Paused():
                return
            case Cancelled():
                self.emit(RunCancelled, reason="cancelled by request")
            case BudgetExceeded():
                self.emit(RunFailed, error={"code": error.code, "node": node_id,
                                            "message": str(error)})
            case Blocked():
                self._envelope_emit(EffectSuppressed, call, inputs=error.inputs,
                                    reason=error.reason)
                self.emit(RunBlocked, suppressed_effects=list(self.state.suppressed_effects))
            case NodeFailure():
                self._envelope_emit(NodeFailed, call, error=error.error,
                                    duration_ms=self._elapsed_ms(finished_at))
                self.emit(RunFailed, error={"code": "node_failed", **error.error,
                                            "node": node_id})
            case _:
                raise error

    def _settle(self, call: NodeCall) -> None:
        """The node's calls now belong to the run (a fork's budget counts them as spent)."""
        settle = getattr(self.oracle, "settle", None)
        if settle is not None:
            settle(call, kept=True)

    def _complete(self, node_id: str, route: str | None, *, memo: bool = False,
                  finished_at: float | None = None) -> None:
        current = self.state.current
        assert current is not None
        ready, waiting = successors(self.graph, self.state, node_id, route)
        duration = self._elapsed_ms(finished_at)
        self._envelope_emit(NodeCompleted, NodeCall(
            node=node_id, kind=current.kind, occurrence=current.occurrence,
            iteration=current.iteration, fingerprint=current.fingerprint, reads=current.reads,
        ), next=ready, waiting=waiting, duration_ms=duration, memo=memo, at=finished_at)

    def _elapsed_ms(self, finished_at: float | None = None) -> float:
        """The current node's duration: until ``finished_at`` (when it ran ahead on a real
        clock), else until now."""
        current = self.state.current
        if current is None:
            return 0.0
        end = self.env.clock() if finished_at is None else finished_at
        return round((end - current.started_at) * 1000, 3)

    def _envelope_emit(self, cls: type[Event], call: NodeCall, **fields: Any) -> Event:
        """Emit an event carrying the node envelope (node, occurrence, iteration)."""
        return self.emit(cls, node=call.node, occurrence=call.occurrence,
                         iteration=call.iteration, **fields)



__all__ = ["END", "CancelToken", "Cancelled", "HumanAnswered", "Paused", "Runner"]
