"""The live runner: executes a graph, appending every transition to the event log.

Each event is folded into the runner's state through the same ``evolve`` the fold uses, so
the live state always equals the state rebuilt from the log, and queued in an
:class:`~forklab.engine.store.EventBatch` that is appended in one transaction:

- before every outside call (a model or tool: ``before_call``; a human gate, a child run),
  so what the run did up to the call — the node's start, the request — is stored and
  visible to live viewers while the call runs, and every result already paid for is
  durable: a crash costs at most the call in flight (a resumed node serves the recorded
  ones back);
- at a node boundary when the node called out — so a live node with one call costs two
  appends instead of one per event — while a stream of reused nodes (memo hits, a fork
  tail's unaffected nodes) is appended in batches of up to ``MAX_BATCH_EVENTS``;
- when the run stops (finished, paused, blocked, cancelled) or an exception escapes.

``on_event`` sees every event once it is stored, in seq order. Node failures become
``node.failed`` + ``run.failed`` events; only integrity violations (a seq conflict: someone
else wrote this run) escape.

Control flow: ``start`` / ``resume`` / ``answer`` enter ``_loop``, which asks the planner for
the next node until the frontier is empty, the run pauses at a human gate, the side-effect
guard blocks it, a node fails, or the cancel token is set.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from forklab.engine import nodes
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
from forklab.engine.memoized import replay_memo
from forklab.engine.oracle import (
    Blocked,
    BudgetExceeded,
    HumanAnswer,
    LiveOracle,
    NodeCall,
    NodeFailure,
    ResumeOracle,
)
from forklab.engine.planner import (
    next_execution,
    next_node,
    read_slice,
    successors,
)
from forklab.engine.reducers import evolve, fold
from forklab.engine.state import RunState
from forklab.engine.store import EventBatch, Store, graph_hash
from forklab.engine.subgraphs import execution_fingerprint
from forklab.engine.telemetry import tracer

log = logging.getLogger("forklab.engine.runner")



class Paused(Exception):
    """Internal: the node is waiting for a human; the run stops with status ``paused``."""


class Cancelled(Exception):
    """Internal: the cancel token was set while a node was running."""


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
        oracle: Any = None,
        hitl: Callable[[dict[str, Any]], HumanAnswer | None] | None = None,
        cancel: CancelToken | None = None,
        on_event: Callable[[Event], None] | None = None,
        graph_version: int | None = None,
    ) -> None:
        self.graph = graph
        self.store = store
        self.run_id = run_id
        self.env = env or Environment()
        self.oracle = oracle or LiveOracle(self.env, hitl)
        self.cancel = cancel or CancelToken()
        self.on_event = on_event
        self.graph_version = graph_version
        self.state = RunState()
        self.ancestry: tuple[str, ...] = ()  # graphs of the runs this child run nests in
        self.batch = EventBatch(store, run_id)
        self._called_out = False  # the current node made an outside call

    # -- the log -------------------------------------------------------------------------
    def emit(self, cls: type[Event], **fields: Any) -> Event:
        """Record one event after the current version: fold it into the state and queue it
        in the batch (stored at the next flush, see the module docstring)."""
        # microsecond precision: what the wire form (ISO time) keeps, so a log read back from
        # a durable store folds to exactly the state the runner had
        at = round(self.env.clock(), 6)
        event = cls(run_id=self.run_id, seq=self.state.version + 1, at=at, **fields)
        evolve(self.state, event)  # type: ignore[arg-type]
        if self.batch.add(event):
            self.flush()
        return event

    def flush(self) -> None:
        """Append the queued events in one transaction, then tell ``on_event`` of each."""
        events = self.batch.flush()
        if self.on_event is not None:
            for event in events:
                self.on_event(event)

    def before_call(self) -> None:
        """Called before every outside call (model, tool, human, child run): honours a
        cancel request, then stores what was recorded so far (see the module docstring)."""
        self.check_cancel()
        self._called_out = True
        self.flush()

    # -- entry points --------------------------------------------------------------------
    def start(
        self, input: dict[str, Any], *, run_kind: str = "primary", label: str = "",
        parent_run_id: str | None = None, tainted_input: list[str] | None = None,
    ) -> RunState:
        """Record ``run.started`` and run to the end (or a gate). ``tainted_input`` names the
        input keys that start tainted (a child run fed from tainted keys)."""
        check_json_value(input, where="input")  # refused before anything is appended
        version = self.graph_version or self.store.save_graph(self.graph)
        self.graph_version = version
        self.emit(RunStarted, graph_id=self.graph.id, graph_version=version,
                  graph_hash=graph_hash(self.graph), input=dict(input), start=self.graph.start,
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
        """Answer the approval gate a paused run waits at, then continue."""
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
        call = NodeCall(node=current.node, kind=current.kind, occurrence=current.occurrence,
                        iteration=current.iteration, fingerprint=current.fingerprint,
                        reads=current.reads)
        route = nodes.finish_approval(self, node, call, answer)  # type: ignore[arg-type]
        self._complete(current.node, route)
        return self._loop()

    def resume_loop(self) -> RunState:
        """Continue from the current in-memory state (after a fork's opening events)."""
        return self._loop()

    # -- the loop ------------------------------------------------------------------------
    def _loop(self) -> RunState:
        with tracer.start_as_current_span("workflow.run", attributes={
            "run.id": self.run_id, "run.kind": self.state.run_kind, "graph.id": self.graph.id,
        }):
            try:
                return self._drive()
            finally:  # stopped, paused or an exception escaped: what was recorded is stored
                self.flush()

    def _drive(self) -> RunState:
        while self.state.status == "running":
            if self.cancel.cancelled:
                self.emit(RunCancelled, reason="cancelled by request")
                break
            node_id = next_node(self.state)
            if node_id is None:
                self.emit(RunCompleted)
                break
            with tracer.start_as_current_span(
                f"node.execute.{self.graph.node(node_id).kind}",
                attributes={"node.id": node_id, "run.id": self.run_id},
            ):
                self._called_out = False
                self._execute(node_id)
            if self._called_out:  # live work: one append per node; reuse batches up
                self.flush()
        return self.state

    def _execute(self, node_id: str) -> None:
        node = self.graph.node(node_id)
        occurrence, iteration = next_execution(self.state, node_id)
        limit = self.graph.max_iterations
        if limit is not None and iteration > limit:
            self.emit(RunFailed, error={
                "code": "loop_limit", "node": node_id,
                "message": f"node {node_id!r} would start iteration {iteration}, beyond "
                           f"max_iterations={limit}",
            })
            return
        reads = read_slice(node.reads, self.state.memory)
        fp = execution_fingerprint(self.graph, self.store, node_id, reads,
                                   occurrence=occurrence, iteration=iteration)
        self.emit(NodeStarted, node=node_id, occurrence=occurrence, iteration=iteration,
                  kind=node.kind, fingerprint=fp, reads=reads)
        call = NodeCall(node=node_id, kind=node.kind, occurrence=occurrence,
                        iteration=iteration, fingerprint=fp, reads=reads)
        substitute = self.oracle.output(call)
        memo = None if substitute is not None else self.oracle.memo(call)
        try:
            if substitute is not None:
                route = nodes.substitute_output(self, node, call, substitute)
            elif memo is not None:
                route = replay_memo(self, call, memo)
            else:
                route = nodes.execute(self, node, call)
        except Paused:
            return
        except Cancelled:
            self.emit(RunCancelled, reason="cancelled by request")
            return
        except BudgetExceeded as exc:
            self.emit(RunFailed, error={"code": exc.code, "node": node_id,
                                        "message": str(exc)})
            return
        except Blocked as blocked:
            self._envelope_emit(EffectSuppressed, call, inputs=blocked.inputs,
                                reason=blocked.reason)
            self.emit(RunBlocked, suppressed_effects=list(self.state.suppressed_effects))
            return
        except NodeFailure as failure:
            self._envelope_emit(NodeFailed, call, error=failure.error,
                                duration_ms=self._elapsed_ms())
            self.emit(RunFailed, error={"code": "node_failed", **failure.error,
                                        "node": node_id})
            return
        self._complete(node_id, route, memo=memo is not None)

    def _complete(self, node_id: str, route: str | None, *, memo: bool = False) -> None:
        current = self.state.current
        assert current is not None
        ready, waiting = successors(self.graph, self.state, node_id, route)
        self._envelope_emit(NodeCompleted, NodeCall(
            node=node_id, kind=current.kind, occurrence=current.occurrence,
            iteration=current.iteration, fingerprint=current.fingerprint, reads=current.reads,
        ), next=ready, waiting=waiting, duration_ms=self._elapsed_ms(), memo=memo)

    def _elapsed_ms(self) -> float:
        current = self.state.current
        if current is None:
            return 0.0
        return round((self.env.clock() - current.started_at) * 1000, 3)

    def _envelope_emit(self, cls: type[Event], call: NodeCall, **fields: Any) -> Event:
        """Emit an event carrying the node envelope (node, occurrence, iteration)."""
        return self.emit(cls, node=call.node, occurrence=call.occurrence,
                         iteration=call.iteration, **fields)

    def check_cancel(self) -> None:
        """Checked between calls inside a node: the node is abandoned, the run cancelled."""
        if self.cancel.cancelled:
            raise Cancelled()


__all__ = ["END", "CancelToken", "HumanAnswered", "Paused", "Runner"]
