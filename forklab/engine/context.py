"""The narrow context a node handler runs with (instead of the whole runner).

A handler (``engine.nodes``, ``engine.memoized``, ``engine.subgraphs``) may read the graph,
its own execution (``call``: node, occurrence, iteration, fingerprint, read slice), which of
its read keys are tainted, the environment and the oracle; it may emit events about its own
execution, check for cancellation and — a subgraph node only — start a child run. It never
sees the run's mutable state, so nodes running concurrently share nothing mutable.

Invariants:
- ``tainted`` is the taint of the node's read keys when it started; a node's own writes are
  buffered until ``node.completed``, and no node that could write those keys runs before it
  completes (the scheduler's rule), so the snapshot is what the sequential run would see;
- ``emit`` adds the execution envelope (node, occurrence, iteration) and hands the event to
  the sink: the runner's open batch for the node at the head of the run, a buffer for a
  node running ahead of it (appended, in order, when it becomes the head). An emitted event
  is folded at once but stored later, at the runner's next flush point;
- ``durable`` is called right before every outside call (a model, a tool, a human, a child
  run): when it returns, everything this execution emitted so far is stored, so what led to
  a call is in the log before the call is made and a call whose result was stored is never
  paid again on resume. A node running ahead of the head has no place in the log yet; its
  ``durable`` returns at once (its calls are made, but its events are stored only when it
  reaches the head — work a crash there loses is re-done on resume).
  A model call (``before_call(model=True)``) may go through ``before_model_call`` instead:
  the runner then stores at once only what a crash must not lose — the result of an earlier
  paid call — and lets a fast model call's own start and request wait for the node's end
  (see ``Runner._before_model_call``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from forklab.engine.environment import Environment
from forklab.engine.events import Event, MemoryWritten
from forklab.engine.graph import GraphSpec
from forklab.engine.oracle import NodeCall, Oracle
from forklab.engine.state import RunState

Sink = Callable[[type[Event], dict[str, Any]], None]
"""Receives one event class and its fields (envelope included); appends or buffers it."""


class Cancelled(Exception):
    """Internal: the cancel token was set while a node was running."""


class ChildRuns(Protocol):
    """What a subgraph node may do besides emitting: run a child graph."""

    def child_graph(self, graph_id: str) -> GraphSpec:
        """The graph a child run of ``graph_id`` runs; raises ``NodeFailure`` when it would
        nest inside itself, a ``ForklabError`` when it is not stored."""

    def run_child(self, graph: GraphSpec, *, child_id: str, oracle: Oracle,
                  input: dict[str, Any], tainted_input: list[str]) -> RunState:
        """Start and run a child run of ``graph`` to its end (or a gate); its final state."""


@dataclass(frozen=True, slots=True)
class NodeContext:
    """What one node execution may read and do."""

    graph: GraphSpec
    call: NodeCall
    run_id: str
    env: Environment
    oracle: Oracle
    tainted: frozenset[str]
    sink: Sink
    cancelled: Callable[[], bool]
    durable: Callable[[], None]
    children: ChildRuns | None = None
    before_model_call: Callable[[], None] | None = None

    def emit(self, cls: type[Event], **fields: Any) -> None:
        """Record an event of this execution (the envelope is added here)."""
        self.sink(cls, {"node": self.call.node, "occurrence": self.call.occurrence,
                        "iteration": self.call.iteration, **fields})

    def check_cancel(self) -> None:
        """Checked before each call: a cancelled run abandons the node."""
        if self.cancelled():
            raise Cancelled()

    def before_call(self, *, model: bool = False) -> None:
        """Right before an outside call: store what this execution emitted (see ``durable``);
        ``model``: the call is a model call, which ``before_model_call`` may let wait."""
        if model and self.before_model_call is not None:
            self.before_model_call()
        else:
            self.durable()

    def reads_tainted(self, untrusted: bool = False) -> bool:
        """Whether what this node writes is tainted: an untrusted tool, or a tainted read."""
        return untrusted or bool(self.tainted)


def tainted_reads(reads: dict[str, Any] | list[str], taint: set[str]) -> frozenset[str]:
    """The keys of a read slice that are tainted (``reads``: the slice or its keys)."""
    return frozenset(key for key in reads if key in taint)


def write_memory(ctx: NodeContext, key: str, value: Any, tainted: bool) -> None:
    """Record one memory write of the node ``ctx`` runs (committed at ``node.completed``)."""
    ctx.emit(MemoryWritten, key=key, value=value, tainted=tainted)
