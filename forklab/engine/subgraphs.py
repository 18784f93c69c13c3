"""Subgraph nodes: a child run of another graph, and what the parent may know about it.

- The child's input is ``node.input`` mapped from the node's read slice (a key the slice
  lacks maps to null); child keys fed from tainted keys start tainted, and parent keys fed
  from tainted child keys (or written by a node that read a tainted key) are tainted.
- The child runs under the oracle its parent's oracle gives it (``oracle.child``): live for a
  live run; inside a fork tail, a fork oracle sharing the tail's budget, capturing reflection
  writes and guarding the child's write tools.
- A child that stops blocked blocks its parent, one over budget stops its parent over
  budget; any other unfinished end fails the node (``subgraph_<status>``).
- The node's fingerprint covers the child's effective input and :func:`graph_identity` (the
  child graph's content, recursively), so a newer child graph is never served a recording.
"""

from __future__ import annotations

from typing import Any

from forklab.engine.canonical import fingerprint
from forklab.engine.context import NodeContext, write_memory
from forklab.engine.errors import ForklabError, GraphNotFound
from forklab.engine.events import SubgraphCompleted, SubgraphStarted
from forklab.engine.graph import GraphSpec, SubgraphNode
from forklab.engine.oracle import (
    Blocked,
    BudgetExceeded,
    ChildResult,
    NodeFailure,
    ensure_json,
)
from forklab.engine.state import RunState


def child_input(node: SubgraphNode, reads: dict[str, Any]) -> dict[str, Any]:
    """The child run's input: ``node.input`` mapped from the read slice (absent -> null)."""
    return {child: reads.get(key) for child, key in node.input.items()}


def graph_identity(store: Any, graph_id: str, seen: frozenset[str] = frozenset()) -> str:
    """Hash of the latest stored version of ``graph_id`` and, recursively, of the graphs its
    subgraph nodes run — what a child run of ``graph_id`` would execute.

    A graph missing from the store hashes as missing (running it fails the node); a graph
    that includes itself is hashed once.
    """
    from forklab.engine.store import graph_hash

    if graph_id in seen:
        return f"cycle:{graph_id}"
    try:
        graph = store.load_graph(graph_id)
    except GraphNotFound:
        return f"missing:{graph_id}"
    children = {n.graph: graph_identity(store, n.graph, seen | {graph_id})
                for n in graph.nodes if isinstance(n, SubgraphNode)}
    return fingerprint({"graph": graph_hash(graph), "children": children})


def execution_fingerprint(graph: GraphSpec, store: Any, node_id: str, reads: dict[str, Any], *,
                          occurrence: int, iteration: int,
                          reads_text: str | None = None) -> str:
    """:func:`~forklab.engine.planner.node_fingerprint` of one execution of ``node_id``; a
    subgraph node's child identity is looked up in ``store``."""
    from forklab.engine.planner import node_fingerprint

    node = graph.node(node_id)
    child = None
    if isinstance(node, SubgraphNode):
        child = {"input": child_input(node, reads), "graph": graph_identity(store, node.graph)}
    return node_fingerprint(graph, node_id, reads, occurrence=occurrence, iteration=iteration,
                            child=child, reads_text=reads_text)


def _child_outcome(node: SubgraphNode, child_id: str, state: RunState) -> None:
    """Raise what a child that did not complete means for its parent."""
    if state.status == "completed":
        return
    where = f"child run {child_id} of graph {node.graph!r}"
    error = state.error or {}
    if state.status == "blocked" and state.suppressed_effects:
        effect = state.suppressed_effects[-1]
        raise Blocked(f"inside {where}, node {effect['node']!r}: {effect['reason']}",
                      dict(effect["inputs"]))
    if state.status == "failed" and error.get("code") in ("live_budget_exceeded",
                                                           "unpriced_model"):
        raise BudgetExceeded(f"inside {where}: {error.get('message', '')}", code=error["code"])
    raise NodeFailure("subgraph_" + state.status, f"{where} ended {state.status}"
                      + (f": {error.get('message')}" if error.get("message") else ""))


def _result(child_id: str, state: RunState) -> ChildResult:
    return ChildResult(child_run_id=child_id, status=state.status,
                       output=ensure_json(state.memory, "child memory"), label="live",
                       cost_usd=state.cost_usd, input_tokens=state.input_tokens,
                       output_tokens=state.output_tokens, tainted=tuple(sorted(state.taint)),
                       call_labels=tuple(c.label for c in state.calls))


def run_subgraph_node(ctx: NodeContext, node: SubgraphNode) -> str | None:
    """Execute a subgraph node: serve or run its child run, then map the outputs back."""
    call, children = ctx.call, ctx.children
    assert children is not None, "a subgraph node runs at the head of its run, never ahead"
    inputs = child_input(node, call.reads)
    tainted_input = sorted(child for child, key in node.input.items() if key in ctx.tainted)
    child_id = ctx.env.ids()

    def run_child() -> ChildResult:
        try:  # loaded only when the child really runs: a recorded child needs no graph
            child_graph = children.child_graph(node.graph)
        except ForklabError as exc:  # a graph missing from the store fails the node
            raise NodeFailure(exc.code, exc.message) from None
        state = children.run_child(child_graph, child_id=child_id,
                                   oracle=ctx.oracle.child(call, node), input=inputs,
                                   tainted_input=tainted_input)
        _child_outcome(node, child_id, state)
        return _result(child_id, state)

    ctx.emit(SubgraphStarted, child_run_id=child_id, graph_id=node.graph)
    ctx.before_call()  # the parent's log says which child it starts before the child runs
    result = ctx.oracle.subgraph(call, node, inputs, run_child)
    ctx.emit(SubgraphCompleted, child_run_id=result.child_run_id, status=result.status,
             output=result.output, label=result.label, cost_usd=result.cost_usd,
             input_tokens=result.input_tokens, output_tokens=result.output_tokens,
             tainted=list(result.tainted))
    write_outputs(ctx, node, result.output, result.tainted)
    return None


def write_outputs(ctx: NodeContext, node: SubgraphNode, output: dict[str, Any],
                  child_tainted: Any) -> None:
    """Map the child's keys back; each is tainted if the child's key was or a read was."""
    read_taint = ctx.reads_tainted()
    for key, child_key in sorted(node.output.items()):  # a stored graph keeps no key order
        write_memory(ctx, key, output.get(child_key),
                     read_taint or child_key in set(child_tainted))
