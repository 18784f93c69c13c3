"""The planner: the one place that decides what runs next.

Fresh runs, resumed runs and fork tails all ask it. It is pure: every answer is a function
of the graph and the folded state (plus a router's decision), and whatever it decides is
written into the log (``node.started`` carries occurrence and iteration, ``node.completed``
carries ``next`` and ``waiting``) so reducers never need the graph.

Semantics:
- the frontier is a FIFO of ready nodes; the run completes when it is empty;
- a node with ``join: all`` becomes ready when every predecessor has completed since it
  last ran; ``join: any`` becomes ready on each arrival (deduplicated in the frontier);
- the iteration counter starts at 1 and goes up when a node runs again within the current
  iteration (a loop closed); an iteration beyond ``max_iterations`` fails the run.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from typing import Any

from forklab.engine.canonical import canonical_json, fingerprint, hash_text
from forklab.engine.graph import END, ITERATION_KEY, Condition, GraphSpec, RouterNode, node_agents
from forklab.engine.state import RunState


def next_node(state: RunState) -> str | None:
    """The node to run next, or None when the run is done."""
    return state.frontier[0] if state.frontier else None


def next_execution(state: RunState, node_id: str,
                   seen: IterationSeen | None = None) -> tuple[int, int]:
    """(occurrence, iteration) the next execution of ``node_id`` will have (``seen``: the
    caller's :class:`IterationSeen`, else the iteration's node list is scanned)."""
    occurrence = state.occurrences.get(node_id, 0) + 1
    ran = node_id in (state.iteration_nodes if seen is None else seen(state))
    return occurrence, state.iteration + 1 if ran else state.iteration


class IterationSeen:
    """The nodes started in a state's current iteration, as a set kept up to date as it grows.

    A run loop asks "has this node run in this iteration?" before every node; scanning the
    list made a long iteration (a fan-out of N, a chain) cost N² in all. Sound because the
    reducers only append to ``RunState.iteration_nodes`` or replace it (see ``NodesSoFar``):
    a different list, or a shorter one, starts the set again. One instance per run loop
    (not thread-safe); the set returned must not be changed.
    """

    __slots__ = ("_list", "_n", "_set")

    def __init__(self) -> None:
        self._list: list[str] | None = None
        self._n = 0
        self._set: set[str] = set()

    def __call__(self, state: RunState) -> set[str]:
        nodes = state.iteration_nodes
        if nodes is not self._list or len(nodes) < self._n:
            self._list, self._n, self._set = nodes, 0, set()
        if len(nodes) > self._n:
            self._set.update(nodes[self._n:])
            self._n = len(nodes)
        return self._set


def successors(
    graph: GraphSpec, state: RunState, node_id: str, route: str | None = None
) -> tuple[list[str], list[str]]:
    """(ready, waiting) successors of ``node_id`` once it completes.

    ``route`` is a router's decision (``END`` finishes that branch). Waiting successors are
    ``join: all`` nodes still missing a predecessor.
    """
    index = graph.index
    if route is not None:
        candidates: tuple[str, ...] | list[str] = [] if route == END else [route]
    else:
        candidates = index.successors.get(node_id, ())
    ready: list[str] = []
    waiting: list[str] = []
    for succ in candidates:
        if index.nodes[succ].join == "all":
            predecessors = index.predecessor_sets.get(succ, frozenset())
            arrived = state.arrivals.get(succ, ())
            # fewer arrivals than missing predecessors cannot cover them: a wide join is
            # checked in full once, when its last predecessor completes, not once per arrival
            # (building the missing set per arrival made a fan-in of N cost N²)
            if (len(arrived) < len(predecessors) - (node_id in predecessors)
                    or not (predecessors - {node_id}).issubset(arrived)):
                waiting.append(succ)
                continue
        ready.append(succ)
    return ready, waiting


def read_slice(node_reads: list[str], memory: dict[str, Any]) -> dict[str, Any]:
    """The values a node reads (absent keys are left out)."""
    return {key: memory[key] for key in node_reads if key in memory}


def node_fingerprint(graph: GraphSpec, node_id: str, reads: dict[str, Any], *,
                     occurrence: int, iteration: int,
                     child: dict[str, Any] | None = None,
                     reads_text: str | None = None) -> str:
    """Hash of everything an execution of ``node_id`` can observe (its memo key).

    Covers the node id and config, the read slice (values of the declared keys that are
    present, and which declared keys are absent — canonical JSON would otherwise not tell an
    absent key from one set to null), the loop context (occurrence and iteration), every
    agent the node drives (resolved per role and instance) and, for a subgraph node,
    ``child``: the child's effective input and the identity of the graph it runs. The
    side-effect guard matches on the same hash, so "same inputs" means the same thing for
    memoization and for side effects. ``reads_text``: ``canonical_json(reads)`` when the
    caller already has it (:class:`ReadsTexts`).
    """
    static = graph.fingerprint_parts(node_id)
    absent = [k for k in graph.node(node_id).reads if k not in reads]
    # canonical_json of {"absent", "agents", "child", "config", "iteration", "node",
    # "occurrence", "reads"} written out key by key in sorted order, so the node's config and
    # agents (the same for every execution) are serialised once per graph version; equal,
    # character for character, to canonical_json of the whole dict (tests check it).
    text = "".join((
        # (an int's canonical JSON is str(int), a string's is json.dumps of it: written
        # directly, as is the usual empty list of absent keys)
        '{"absent":', canonical_json(sorted(set(absent))) if absent else "[]",
        ',"agents":', static.agents,
        "" if child is None else ',"child":' + canonical_json(child),
        ',"config":', static.config,
        ',"iteration":', _json_int(iteration),
        ',"node":', _JSON_TEXT(node_id),
        ',"occurrence":', _json_int(occurrence),
        ',"reads":', canonical_json(reads) if reads_text is None else reads_text, "}",
    ))
    return hash_text(text)


class ReadsTexts:
    """``canonical_json`` of read slices whose values are all strings, remembered (at most
    :attr:`LIMIT` of them): a fan-out's N workers read the same brief, and its text was
    about half of each one's fingerprint. Keyed by the slice's items themselves — a string
    is immutable and equal strings have one text, so a remembered text is always the one
    ``canonical_json`` writes; any other value (a number, which ``True == 1 == 1.0`` would
    confuse, a container, which could change in place) is never remembered. One instance
    per run loop (not thread-safe); nothing outlives it."""

    __slots__ = ("_texts",)
    LIMIT = 256

    def __init__(self) -> None:
        self._texts: dict[tuple[tuple[str, Any], ...], str] = {}

    def __call__(self, reads: dict[str, Any]) -> str | None:
        """``canonical_json(reads)``, remembered; None (not computed) for a slice holding
        anything but strings."""
        key = tuple(reads.items())
        for _, value in key:
            if type(value) is not str:
                return None
        text = self._texts.get(key)
        if text is None:
            if len(self._texts) >= self.LIMIT:
                self._texts.clear()
            text = self._texts[key] = canonical_json(reads)
        return text


_JSON_TEXT = json.JSONEncoder(ensure_ascii=False).encode
"""``json.dumps(value, ensure_ascii=False)``, which builds this encoder per call (4x the
cost of encoding a node id)."""


def _json_int(value: int) -> str:
    """``canonical_json`` of an int without the general path (anything else takes it)."""
    return str(value) if type(value) is int else canonical_json(value)


def fingerprint_reference(graph: GraphSpec, node_id: str, reads: dict[str, Any], *,
                          occurrence: int, iteration: int,
                          child: dict[str, Any] | None = None) -> str:
    """:func:`node_fingerprint` computed the slow, obvious way (what tests compare with)."""
    node = graph.node(node_id)
    return fingerprint({
        "node": node_id,
        "config": node.model_dump(mode="json", exclude={"description"}),
        "reads": reads,
        "absent": sorted({key for key in node.reads if key not in reads}),
        "occurrence": occurrence,
        "iteration": iteration,
        "agents": node_agents(graph, node),
        "child": child,
    })


_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq, "ne": operator.ne, "gt": operator.gt, "gte": operator.ge,
    "lt": operator.lt, "lte": operator.le,
}


def _holds(cond: Condition, memory: dict[str, Any], iteration: int) -> bool:
    present = cond.key == ITERATION_KEY or cond.key in memory
    value = iteration if cond.key == ITERATION_KEY else memory.get(cond.key)
    if cond.op == "exists":
        return present
    if cond.op == "truthy":
        return bool(value)
    if cond.op == "falsy":
        return not value
    try:
        if cond.op == "in":
            return value in (cond.value or ())
        if cond.op == "not_in":
            return value not in (cond.value or ())
        if cond.op == "contains":
            return cond.value in value if isinstance(value, (str, list, dict)) else False
        return bool(_OPS[cond.op](value, cond.value))
    except TypeError:  # incomparable or non-container values are a non-match, not a crash
        return False


def route_by_rules(router: RouterNode, memory: dict[str, Any], iteration: int) -> tuple[str, str]:
    """(target, reason) of the first rule whose conditions all hold, else the default.

    ``memory`` is the router's read slice at runtime: a key outside it is absent.
    """
    for i, rule in enumerate(router.rules):
        if all(_holds(c, memory, iteration) for c in rule.when):
            return rule.to, f"rule {i}"
    return (router.default or END), "default"
