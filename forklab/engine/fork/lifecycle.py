"""After a fork: rebasing onto a newer graph, promoting a fix, saving a regression case.

- ``rebase_graph``: fork onto a newer graph version only if every prefix node is unchanged
  in it (same fingerprint for the same read slice) — else ``prefix_diverged``.
- ``promote``: adopt a fork's config-type changes as a new version of its base graph —
  only those its tail applied, so the promoted graph reproduces the fork — refused with
  ``promote_conflict`` when a newer version changed the same nodes or a change never took
  effect (``reason: not_applied``).
- cases: a finished fork saved with its log and pass criteria; ``run_case_against``
  re-drives it through its graph's current (or a named) version, with the case's changes
  applied again and every call served from its recording, and checks the criteria — so a
  graph edit that breaks a criterion fails the case (SPEC §3.9).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from forklab.engine.canonical import canonical_json
from forklab.engine.errors import (
    ForklabError,
    InvalidChange,
    PrefixDiverged,
    PromoteConflict,
    PromoteNotApplied,
    indefinite,
)
from forklab.engine.events import from_wire
from forklab.engine.fork.apply import effective_graph
from forklab.engine.fork.base import graph_of as _graph_of
from forklab.engine.fork.changes import Change, parse_change, parse_changes
from forklab.engine.fork.points import ForkPoint
from forklab.engine.graph import Condition, GraphSpec, SubgraphNode, parse_graph
from forklab.engine.planner import _holds
from forklab.engine.reducers import fold
from forklab.engine.state import RunState
from forklab.engine.store import GraphStore, MemoryStore, Store
from forklab.engine.subgraphs import execution_fingerprint

if TYPE_CHECKING:
    from forklab.engine.fork.base import BaseRun


def rebase_graph(base: BaseRun, version: int, point: ForkPoint) -> GraphSpec:
    """The base's effective graph rebuilt on ``version`` of its root graph: that version
    with every lineage run's config-type changes applied in order. Refused
    (``prefix_diverged``) unless every execution before ``point`` has the same fingerprint
    under it (under the changes of the run that made it) as recorded."""
    graph = base.store.load_graph(base.state.graph_id, version)
    graphs: dict[str, GraphSpec] = {}
    for link in base.lineage.links:
        config = [c for c in link.own_changes() if c.promotes()]
        graph = effective_graph(graph, config, one_request=False) if config else graph
        graphs[link.run_id] = graph
    for entry in base.index.entries[:point.position or 0]:
        under = graphs.get(entry.run_id, graph)
        if not under.has_node(entry.node):
            raise PrefixDiverged(f"graph version {version} has no node {entry.node!r}, which "
                                 "ran before the fork point", node=entry.node, version=version)
        ex = base.state.executions[entry.position]
        fp = execution_fingerprint(under, base.store, ex.node, ex.reads,
                                   occurrence=ex.occurrence, iteration=ex.iteration)
        if fp != ex.fingerprint:
            raise PrefixDiverged(
                f"node {ex.node!r} changed in graph version {version} and ran before the fork "
                "point, so the recorded prefix no longer matches; fork at or before it",
                node=ex.node, version=version)
    return graphs[base.run_id]


@dataclass
class PromoteResult:
    graph_id: str
    from_version: int
    version: int
    fork_run_id: str
    promoted: list[dict[str, Any]]
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def wire(self) -> dict[str, Any]:
        return {"graph_id": self.graph_id, "from_version": self.from_version,
                "version": self.version, "fork_run_id": self.fork_run_id,
                "promoted": self.promoted, "skipped": self.skipped}


def _touched_nodes(changes: list[Any]) -> set[str]:
    return {getattr(c, "target", getattr(c, "node", "")).split(".")[0] for c in changes}


def _active_from(fork_run_id: str, state: RunState, store: Store) -> list[tuple[Change, int]]:
    """Each of a fork's combined changes with the position in its logical run from which it
    was in force: a run's own changes from the first execution of its own part — or of a
    later run's, when a descendant re-applied them earlier (a fork at an inherited point)."""
    from forklab.engine.fork.lineage import Lineage, load_link

    starts = dict(state.fork.holders if state.fork else ())
    starts[fork_run_id] = state.prefix_executions
    lineage = Lineage.load(load_link(fork_run_id, store), store)
    found: list[tuple[Change, int]] = []
    since = state.prefix_executions
    for link in reversed(lineage.links[1:]):
        since = min(since, starts.get(link.run_id, since))
        found[:0] = [(item, since) for item in link.own_changes()]
    changes = parse_changes(state.changes) if state.changes else []
    lost = changes[:len(changes) - len(found)]  # an archived ancestor's: from the earliest
    return [(item, since) for item in lost] + found


def _not_applied(item: Change, since: int, state: RunState) -> str | None:
    """Why promoting ``item`` would not reproduce the fork (None: its tail applied it, and
    only it): its node ran before the change was in force — a re-run of the promoted graph
    would run that execution under the change too — or never ran while it was."""
    node = item.scoped_node()
    positions = [i for i, ex in enumerate(state.executions) if ex.node == node]
    before = [i for i in positions if i < since]
    if before:
        ex = state.executions[before[0]]
        return (f"{item.describe()}: node {node!r} ran before the point the change was "
                f"applied at (execution {ex.occurrence}), where the fork kept its recorded "
                "output; the promoted graph would run it under the change, so it would not "
                "reproduce the fork")
    if not any(i >= since for i in positions):
        return (f"{item.describe()}: node {node!r} never ran while the change was in force; "
                "the fork's tail never applied it")
    return None


def promote(fork_run_id: str, *, store: Store, only_applied: bool = False) -> PromoteResult:
    """Save the config-type changes of a fork and of every ancestor (its combined changes,
    in lineage order, a later one replacing an earlier one that set the same thing) as one
    new version of its root's graph.

    Invariant: the promoted graph, re-run from the start on the fork's input, reproduces the
    fork (given deterministic answers). So only changes the fork's tail really applied are
    carried — each one's node ran while it was in force and not before. Any other config
    change is refused (``promote_conflict``, ``reason: not_applied``, naming each one), or,
    with ``only_applied``, left out and listed in ``skipped`` with why: its node then runs in
    the promoted graph as the fork recorded it.
    """
    state = fold(store.read(fork_run_id))
    if state.run_kind != "counterfactual":
        raise InvalidChange(f"run {fork_run_id!r} is {indefinite(state.run_kind)} run, not a "
                            "fork; only a fork's changes can be promoted", run_id=fork_run_id)
    changes = _active_from(fork_run_id, state, store)
    skipped = [{"change": c.wire(), "reason": (
        f"{c.kind} changes one call, not the graph" if c.call_address() is not None
        else f"{c.kind} changes state, not the graph") + "; it cannot be promoted"}
        for c, _ in changes if not c.promotes()]
    config = [c for c, _ in changes if c.promotes()]
    if not config:
        raise InvalidChange(
            f"fork {fork_run_id!r} has no config-type change (model, prompt, temperature, "
            "config) to promote; its changes only alter state", skipped=skipped)
    unapplied = [(c, why) for c, since in changes if c.promotes()
                 and (why := _not_applied(c, since, state)) is not None]
    if unapplied and not only_applied:
        raise PromoteNotApplied(
            f"fork {fork_run_id!r} has config change(s) its tail never applied as they would "
            "be promoted — " + "; ".join(why for _, why in unapplied) + ". Fork again at or "
            "before the node's first execution, or promote only the applied changes "
            "(only_applied; CLI --only-applied)", reason="not_applied",
            changes=[c.wire() for c, _ in unapplied])
    config = [c for c in config if all(c is not other for other, _ in unapplied)]
    skipped += [{"change": c.wire(), "reason": why} for c, why in unapplied]
    if not config:
        raise InvalidChange(
            f"fork {fork_run_id!r} has no config-type change its tail applied; nothing to "
            "promote", skipped=skipped)
    graph_id, from_version = state.graph_id, state.graph_version
    latest = store.graph_versions(graph_id)[-1]
    base_graph = store.load_graph(graph_id, from_version)
    current = store.load_graph(graph_id, latest)
    for node in sorted(_touched_nodes(config)):
        before = base_graph.node(node).model_dump(mode="json") if base_graph.has_node(node) else None
        now = current.node(node).model_dump(mode="json") if current.has_node(node) else None
        if canonical_json(before) != canonical_json(now):
            raise PromoteConflict(
                f"graph {graph_id!r} gained version {latest} after the fork's base (version "
                f"{from_version}) and it changes node {node!r} too; fork the newer version "
                "and promote that", node=node, base_version=from_version, latest=latest)
    version = store.save_graph(effective_graph(current, config, one_request=False))
    return PromoteResult(graph_id=graph_id, from_version=from_version, version=version,
                         fork_run_id=fork_run_id, promoted=[c.wire() for c in config],
                         skipped=skipped)


class Case(BaseModel):
    """A saved fork: its edited inputs, changes, recorded tail and pass criteria."""

    name: str
    fork_run_id: str
    base_run_id: str | None
    graph: dict[str, Any]
    input: dict[str, Any]
    changes: list[dict[str, Any]]
    events: list[dict[str, Any]]
    criteria: list[Condition] = Field(default_factory=list)
    final_memory: dict[str, Any] = Field(default_factory=dict)
    graphs: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="graphs its subgraph nodes run, by id (wire form)")


@dataclass
class CaseResult:
    name: str
    passed: bool
    failures: list[str]
    note: str = ""
    graph_id: str | None = None  # the graph the case ran against …
    graph_version: int | None = None  # … and its version (None: the graph frozen in the case)

    def wire(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "failures": self.failures,
                "note": self.note, "graph_id": self.graph_id,
                "graph_version": self.graph_version}


def case_graph(case: Case, *, store: Store, version: int | None = None) -> tuple[GraphSpec, int]:
    """The graph a case runs against: ``version`` (default: the latest) of its root graph in
    ``store``, with the case's config-type changes (its fork's, in lineage order) applied
    again — what the fork would run under today. Raises the store's error for an unknown
    graph or version, and ``InvalidChange`` when the changes no longer apply."""
    graph_id = str(case.graph["id"])
    versions = store.graph_versions(graph_id)
    chosen = version if version is not None else (versions[-1] if versions else 0)
    graph = store.load_graph(graph_id, chosen)
    config = [c for c in parse_changes(case.changes) if c.promotes()]
    return effective_graph(graph, config, one_request=False) if config else graph, chosen


def run_case_against(case: Case, *, store: Store, version: int | None = None) -> CaseResult:
    """Run ``case`` against its graph's current version in ``store`` (or ``version``), its
    subgraph nodes' graphs from ``store`` too; the result names the version it ran. A graph
    or version that cannot be loaded, or changes that no longer apply, fail the case."""
    graph_id = str(case.graph["id"])
    try:
        graph, chosen = case_graph(case, store=store, version=version)
    except ForklabError as exc:
        where = f"version {version} of graph" if version is not None else "graph"
        return CaseResult(case.name, False, [f"{exc.code}: the case cannot run against "
                                             f"{where} {graph_id!r}: {exc.message}"],
                          graph_id=graph_id, graph_version=version)
    result = run_case(case, graph=graph, graphs=store)
    result.graph_id, result.graph_version = graph_id, chosen
    return result


def save_case(fork_run_id: str, *, name: str, store: Store,
              criteria: Sequence[Condition] = ()) -> Case:
    events = store.read(fork_run_id)
    state = fold(events)
    if state.run_kind != "counterfactual" or not state.finished:
        raise InvalidChange(f"run {fork_run_id!r} is {indefinite(state.status)} "
                            f"{state.run_kind} run; only a finished fork can be saved as a case",
                            run_id=fork_run_id)
    for item in state.changes:
        parse_change(item)
    graph = _graph_of(state, events, store)
    return Case(name=name, fork_run_id=fork_run_id, base_run_id=state.parent_run_id,
                graph=graph.to_wire(), input=state.input,
                changes=state.changes, events=[e.to_wire() for e in events],
                criteria=list(criteria),
                final_memory=state.memory, graphs=_child_graphs(graph, store))


def _child_graphs(graph: GraphSpec, store: Store) -> dict[str, dict[str, Any]]:
    """Every graph ``graph``'s subgraph nodes run, recursively (latest stored versions)."""
    found: dict[str, dict[str, Any]] = {}
    pending = [graph]
    while pending:
        for node in pending.pop().nodes:
            if isinstance(node, SubgraphNode) and node.graph not in found:
                try:
                    child = store.load_graph(node.graph)
                except ForklabError:
                    continue
                found[node.graph] = child.to_wire()
                pending.append(child)
    return found


def run_case(case: Case, *, graph: GraphSpec | None = None,
             graphs: GraphStore | None = None) -> CaseResult:
    """Re-drive the case through ``graph`` (default: the graph frozen in the case — a
    regression suite wants :func:`run_case_against`, the graph's current version) with every
    call served from its recording; check its criteria. Subgraph nodes' graphs come from
    ``graphs`` (default: those frozen in the case).

    A case without criteria cannot fail: it passes with a note saying so (and how it ended).
    """
    from forklab.engine.fork.replay import replay_events

    if graphs is None:
        graphs = MemoryStore()
        for wire_graph in case.graphs.values():
            graphs.save_graph(parse_graph(wire_graph))
    events = [from_wire(e) for e in case.events]
    try:
        state = replay_events(events, graph or parse_graph(case.graph), strict=False,
                              graphs=graphs)
    except ForklabError as exc:
        if not case.criteria:
            return CaseResult(case.name, True, [], NO_CRITERIA + f" (it stopped: {exc.code})")
        return CaseResult(case.name, False, [f"{exc.code}: {exc.message}"])
    if not case.criteria:
        return CaseResult(case.name, True, [], NO_CRITERIA + f" (it ended {state.status})")
    failures = [f"{c.key} {c.op} {c.value!r} does not hold (value: "
                f"{state.memory.get(c.key)!r})" for c in case.criteria
                if not _holds(c, state.memory, state.iteration)]
    return CaseResult(case.name, not failures, failures)


NO_CRITERIA = "no criteria: this case cannot fail; add criteria to make it a check"
"""What a case without criteria says (SPEC §3.9), when it is saved and each time it runs."""
