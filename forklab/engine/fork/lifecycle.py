"""After a fork: rebasing onto a newer graph, promoting a fix, saving a regression case.

- ``rebase_graph``: fork onto a newer graph version only if every prefix node is unchanged
  in it (same fingerprint for the same read slice) — else ``prefix_diverged``.
- ``promote``: adopt a fork's config-type changes as a new version of its base graph,
  refused with ``promote_conflict`` when a newer version changed the same nodes.
- cases: a finished fork saved with its log and pass criteria; ``run_case`` re-drives it
  with every call served from its recording and checks the criteria (SPEC §3.9).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from forklab.engine.canonical import canonical_json
from forklab.engine.errors import ForklabError, InvalidChange, PrefixDiverged, PromoteConflict
from forklab.engine.events import from_wire
from forklab.engine.fork.apply import effective_graph
from forklab.engine.fork.changes import CONFIG_KINDS, parse_change, parse_changes
from forklab.engine.fork.points import ForkPoint
from forklab.engine.graph import Condition, GraphSpec, parse_graph
from forklab.engine.planner import _holds, node_fingerprint
from forklab.engine.reducers import fold
from forklab.engine.store import Store

if TYPE_CHECKING:
    from forklab.engine.fork.core import BaseRun


def rebase_graph(base: BaseRun, version: int, point: ForkPoint) -> GraphSpec:
    graph = base.store.load_graph(base.state.graph_id, version)
    for ex in base.own_executions():
        if ex.start_seq > point.seq:
            break
        if ex.node not in graph.node_ids():
            raise PrefixDiverged(f"graph version {version} has no node {ex.node!r}, which ran "
                                 "before the fork point", node=ex.node, version=version)
        if node_fingerprint(graph, ex.node, ex.reads) != ex.fingerprint:
            raise PrefixDiverged(
                f"node {ex.node!r} changed in graph version {version} and ran before the fork "
                "point, so the recorded prefix no longer matches; fork at or before it",
                node=ex.node, version=version)
    return graph


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


def promote(fork_run_id: str, *, store: Store) -> PromoteResult:
    """Save the fork's config-type changes as a new version of its base's graph."""
    state = fold(store.read(fork_run_id))
    if state.run_kind != "counterfactual":
        raise InvalidChange(f"run {fork_run_id!r} is a {state.run_kind} run, not a fork; only "
                            "a fork's changes can be promoted", run_id=fork_run_id)
    changes = parse_changes(state.changes)
    config = [c for c in changes if c.kind in CONFIG_KINDS]
    skipped = [{"change": c.wire(), "reason": f"{c.kind} changes state, not the graph; "
                "it cannot be promoted"} for c in changes if c.kind not in CONFIG_KINDS]
    if not config:
        raise InvalidChange(
            f"fork {fork_run_id!r} has no config-type change (model, prompt, temperature, "
            "config) to promote; its changes only alter state", skipped=skipped)
    graph_id, from_version = state.graph_id, state.graph_version
    latest = store.graph_versions(graph_id)[-1]
    base_graph = store.load_graph(graph_id, from_version)
    current = store.load_graph(graph_id, latest)
    for node in sorted(_touched_nodes(config)):
        before = base_graph.node(node).model_dump(mode="json") if node in base_graph.node_ids() else None
        now = current.node(node).model_dump(mode="json") if node in current.node_ids() else None
        if canonical_json(before) != canonical_json(now):
            raise PromoteConflict(
                f"graph {graph_id!r} gained version {latest} after the fork's base (version "
                f"{from_version}) and it changes node {node!r} too; fork the newer version "
                "and promote that", node=node, base_version=from_version, latest=latest)
    version = store.save_graph(effective_graph(current, config))
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


@dataclass
class CaseResult:
    name: str
    passed: bool
    failures: list[str]
    note: str = ""

    def wire(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "failures": self.failures,
                "note": self.note}


def save_case(fork_run_id: str, *, name: str, store: Store,
              criteria: list[dict[str, Any]] | None = None) -> Case:
    from forklab.engine.fork.core import _graph_of

    events = store.read(fork_run_id)
    state = fold(events)
    if state.run_kind != "counterfactual" or not state.finished:
        raise InvalidChange(f"run {fork_run_id!r} is a {state.status} {state.run_kind} run; "
                            "only a finished fork can be saved as a case", run_id=fork_run_id)
    for item in state.changes:
        parse_change(item)
    return Case(name=name, fork_run_id=fork_run_id, base_run_id=state.parent_run_id,
                graph=_graph_of(state, events, store).to_wire(), input=state.input,
                changes=state.changes, events=[e.to_wire() for e in events],
                criteria=[Condition.model_validate(c) for c in criteria or []],
                final_memory=state.memory)


def run_case(case: Case, *, graph: GraphSpec | None = None) -> CaseResult:
    """Re-drive the case with every call served from its recording; check its criteria."""
    from forklab.engine.fork.replay import replay_events

    events = [from_wire(e) for e in case.events]
    try:
        state = replay_events(events, graph or parse_graph(case.graph), strict=False)
    except ForklabError as exc:
        return CaseResult(case.name, False, [f"{exc.code}: {exc.message}"])
    failures = [f"{c.key} {c.op} {c.value!r} does not hold (value: "
                f"{state.memory.get(c.key)!r})" for c in case.criteria
                if not _holds(c, state.memory, state.iteration)]
    if state.status != "completed" and not case.criteria:
        failures.append(f"the case ended {state.status}")
    note = "" if case.criteria else "no criteria: this case can only fail if it stops completing"
    return CaseResult(case.name, not failures, failures, note)
