"""Fidelity (SPEC §3.7) and the metamorphic checks of issue 8.

- ``fork_check``: a fork that changes nothing, with memoization on, makes no model or tool
  calls and reproduces the base run's final outcome exactly — checked at every fork point.
- ``deep_check``: three metamorphic relations over a recorded run, with changes derived from
  the run itself (a prompt change of the last agent node that ran; a memory change of the key
  whose first reader or writer comes latest; an input patch of the input key read latest):
  1. *point independence* — the variant is the same whether forked at ``start`` or at any
     later point before the first execution the change affects (for an input patch: at any
     point at all, since it means "the run had started with this input");
  2. *memoize is invisible* — memoize on and off give the same outcome and path;
  4. *a fork of a fork is a fork of its root with the changes combined* — at an inherited
     point (``start``) and at the fork's own first point.

Every variant is written to a :class:`ScratchStore` over the run's store, which is never
written; approval gates are answered as recorded when shown what they were shown before
(:func:`recorded_human`). Deep checks need deterministic answers: a run whose graph (or a child graph) drives
an agent on any provider but ``scripted`` is reported skipped, never failed — two live calls
to a sampling model may differ, which says nothing about forking.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.actions import HumanDecision
from forklab.engine.canonical import canonical_equals, canonical_json
from forklab.engine.environment import Environment
from forklab.engine.errors import ForklabError
from forklab.engine.fork.changes import (
    Change,
    InputPatchChange,
    MemoryChange,
    PromptChange,
    change,
)
from forklab.engine.fork.core import BaseRun, load_base, prepare_fork, run_plan
from forklab.engine.fork.diff import diff_runs, format_run_diff
from forklab.engine.fork.points import ForkPoint
from forklab.engine.fork.result import ForkResult, fork
from forklab.engine.fork.scratch import ScratchStore
from forklab.engine.graph import AgentNode, GraphSpec, RouterNode, SubgraphNode
from forklab.engine.oracle import HumanAnswer
from forklab.engine.state import Execution, RunState
from forklab.engine.store import Store

DEEP_MARKER = "forkcheck --deep"
"""Appended to a derived prompt and used as a derived memory value: visibly a check's."""


@dataclass
class FidelityResult:
    run_id: str
    point: ForkPoint
    ok: bool
    calls: int
    detail: str = ""

    def wire(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "point": self.point.to_wire(), "ok": self.ok,
                "calls": self.calls, "detail": self.detail}


def fork_check(run_id: str, *, store: Store, env: Environment | None = None,
               scratch: Store | None = None) -> list[FidelityResult]:
    """Null-fork every point of ``run_id``'s own log; variants go to ``scratch`` (by default
    a :class:`ScratchStore` over ``store``).

    Each null fork is exactly what ``fork()`` runs: the tail reads through to ``store`` —
    child graphs, child runs — as a fork's does. (A bare memory store could not load a
    subgraph node's child graph, so its fingerprint missed the recording and every point
    before a subgraph node was reported a mismatch that ``fork()`` never makes.)

    A fork is checked at its own points only: at a point it inherited (before its fork
    point) a null fork applies the fork's changes that much earlier, which is another fork,
    not a reproduction of this one.
    """
    base = load_base(run_id, store=store, env=env, fold_log=True)  # verify the log itself
    results = []
    for point in base.index.points():
        if point.run_id not in (None, run_id):
            continue
        plan = prepare_fork(base, at=point.address(), policy={"memoize": True},
                            ignore_budget=True)
        runner = run_plan(plan, store=scratch or ScratchStore(store), ignore_budget=True)
        state = runner.state
        start = state.tail_from_call
        # a call a change supplies (``simulated``: an answer, a tool result, an output the
        # fork's own changes give, re-applied by its null fork) costs nothing and calls
        # nobody; ``live`` and ``changed`` ones are paid
        paid = [c for c in state.calls[start:] if c.label not in ("reused", "simulated")]
        same = canonical_equals(state.outcome(), base.state.outcome())
        detail = ""
        if paid or not same:
            detail = format_run_diff(diff_runs(base.state, state),
                                     f"null fork at seq {point.seq} ({point.label})")
            if paid:
                detail += f"\n  calls     {len(paid)} paid call(s): " + ", ".join(
                    f"{c.node}:{c.kind}:{c.label}" + (f" [{c.call}]" if c.call else "")
                    for c in paid)  # with its key: names the first call that differs
            error = state.error or {}
            if error and error != (base.state.error or {}):  # e.g. prefix_diverged, saying
                detail += f"\n  error     {error.get('type')}: {error.get('message')}"  # what
        results.append(FidelityResult(run_id=run_id, point=point, ok=same and not paid,
                                      calls=len(paid), detail=detail))
    return results


# -- metamorphic checks (forkcheck --deep) ---------------------------------------------------


@dataclass
class MetamorphicResult:
    """One metamorphic relation checked on one run: what was compared, and whether it held."""

    run_id: str
    check: str  # point_independence | memoize | fork_of_fork
    changes: list[dict[str, Any]]
    compared: list[str] = field(default_factory=list)  # what was held equal, readably
    ok: bool = True
    detail: str = ""
    skipped: str = ""

    @property
    def title(self) -> str:
        what = "; ".join(_describe(c) for c in self.changes) or "no change"
        return f"{self.check.replace('_', '-')}: {what}"

    def wire(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "check": self.check, "changes": self.changes,
                "compared": self.compared, "ok": self.ok, "detail": self.detail,
                "skipped": self.skipped}


def _describe(wire: dict[str, Any]) -> str:
    from forklab.engine.fork.changes import parse_change

    return parse_change(wire).describe()


def _providers(graph: GraphSpec) -> set[str]:
    refs: list[Any] = list(graph.agents.values())
    for node in graph.nodes:
        if isinstance(node, (AgentNode, RouterNode)) and node.agent is not None:
            refs.append(node.agent)
        if isinstance(node, AgentNode) and node.roles:
            for role in node.roles.values():
                refs += [role.agent, *role.instances.values()]
    return {graph.resolve_agent(ref).provider for ref in refs}


def _nondeterministic(graph: GraphSpec, store: Store, seen: set[str] | None = None) -> str:
    """Why the run's answers cannot be reproduced call for call ('' when they can)."""
    seen = seen if seen is not None else {graph.id}
    others = sorted(_providers(graph) - {"scripted"})
    if others:
        return (f"graph {graph.id!r} drives agents on {', '.join(others)}: metamorphic "
                "checks compare live calls, which only the scripted provider reproduces")
    for node in graph.nodes:
        if isinstance(node, SubgraphNode) and node.graph not in seen:
            seen.add(node.graph)
            try:
                child = store.load_graph(node.graph)
            except ForklabError as exc:
                return f"child graph {node.graph!r} cannot be loaded: {exc.message}"
            reason = _nondeterministic(child, store, seen)
            if reason:
                return reason
    return ""


def derived_changes(base: BaseRun) -> list[Change]:
    """Changes taken from the run itself: a prompt of its last agent, a key it reads late."""
    found: list[Change] = []
    agents = [e for e in base.state.executions if _agent_target(base.graph, e) is not None]
    if agents:
        target = _agent_target(base.graph, agents[-1])
        assert target is not None
        found.append(change.prompt(target, f"{_prompt_of(base.graph, target)} ({DEEP_MARKER})"))
    key = _late_key(base)
    if key is not None:
        found.append(change.memory(set={key: DEEP_MARKER}))
    if base.state.input:
        read = [k for e in reversed(base.state.executions) for k in _declared(base.graph, e)
                if k in base.state.input]
        found.append(change.input_patch({(read or sorted(base.state.input))[0]: DEEP_MARKER}))
    return found


def _agent_target(graph: GraphSpec, ex: Execution) -> str | None:
    node = graph.node(ex.node) if graph.has_node(ex.node) else None
    if isinstance(node, AgentNode) and node.roles:
        return f"{node.id}.{node.ordered_roles()[0][0]}"
    if isinstance(node, (AgentNode, RouterNode)) and node.agent is not None:
        return node.id
    return None


def _prompt_of(graph: GraphSpec, target: str) -> str:
    node_id, _, role = target.partition(".")
    node = graph.node(node_id)
    if isinstance(node, AgentNode) and node.roles and role:
        return graph.resolve_agent(node.roles[role].agent).system_prompt
    agent = getattr(node, "agent", None)
    return graph.resolve_agent(agent).system_prompt if agent is not None else ""


def _late_key(base: BaseRun) -> str | None:
    """The declared read whose first affected execution comes latest (most points to check);
    among those, the one first read latest."""
    executions = base.state.executions
    keys = {k for e in executions for k in _declared(base.graph, e)}
    best: tuple[int, int, str] | None = None
    for key in sorted(keys):
        first = _first_affected(change.memory(set={key: DEEP_MARKER}), base.graph, executions)
        reader = next(i for i, e in enumerate(executions) if key in _declared(base.graph, e))
        score = (executions.index(first) if first is not None else len(executions), reader, key)
        if best is None or score[:2] > best[:2]:
            best = score
    return best[2] if best else None


def _declared(graph: GraphSpec, ex: Execution) -> list[str]:
    return list(graph.node(ex.node).reads) if graph.has_node(ex.node) else list(ex.reads)


def _first_affected(item: Change, graph: GraphSpec,
                    executions: list[Execution]) -> Execution | None:
    """The first execution a derived change can alter (its node; a reader or writer of its key)."""
    if isinstance(item, PromptChange):
        node = item.target.split(".")[0]
        return next((e for e in executions if e.node == node), None)
    if isinstance(item, MemoryChange):
        keys = set(item.set) | set(item.delete)
        return next((e for e in executions if keys & set(_declared(graph, e))
                     or keys & (set(e.writes) | set(e.deletes))), None)
    if isinstance(item, InputPatchChange):
        return None  # "the run had started with this input": the same from every point
    raise ValueError(f"{item.kind} is not a change forkcheck derives")


Fork = Callable[..., ForkResult]
Human = Callable[[dict[str, Any]], HumanAnswer | None]


def recorded_human(state: RunState) -> Human:
    """A human who gives a gate the answer it gave when shown exactly the same thing.

    Approval gates are the one live call forkcheck cannot make deterministic by itself: with
    memoize off, a gate the run passed would otherwise pause every variant. Shown anything
    else, this human does not answer (the variant pauses, as it would for a person).
    """
    answers: dict[tuple[str, str], HumanAnswer] = {}
    for ex in state.executions:
        for action in ex.actions:
            if isinstance(action, HumanDecision):
                answers.setdefault((ex.node, canonical_json(ex.reads)), HumanAnswer(
                    decision=action.decision, data=action.data,
                    memory_updates=action.memory_updates, answered_by="forkcheck",
                    recorded=True))

    def answer(request: dict[str, Any]) -> HumanAnswer | None:
        return answers.get((request["node"], canonical_json(request.get("context") or {})))
    return answer


def _runner(scratch: ScratchStore, env: Environment, human: Human) -> Fork:
    def run(base: str, *, at: Any, changes: list[Change], memoize: bool = True) -> ForkResult:
        return fork(base, store=scratch, env=env, at=at, change=changes, hitl=human,
                    policy={"memoize": memoize}, ignore_budget=True)
    return run


def _point_before(base: BaseRun, ex: Execution) -> ForkPoint:
    """The boundary before ``ex`` in the logical run: of a fork's log or, for an execution
    it inherited, of the log holding it (a seq alone would name the wrong log)."""
    return next(e.point() for e in base.index.entries
                if (e.node, e.occurrence) == (ex.node, ex.occurrence))


def _compare(result: MetamorphicResult, a: ForkResult, b: ForkResult, left: str,
             right: str) -> None:
    result.compared.append(f"{left} == {right}")
    assert a.state is not None and b.state is not None
    if result.ok and not canonical_equals(a.state.outcome(), b.state.outcome()):
        result.ok = False
        result.detail = format_run_diff(diff_runs(a.state, b.state),
                                        f"{result.title}: {left} vs {right}")


def _point_independence(base: BaseRun, item: Change, run: Fork) -> MetamorphicResult:
    """Forked at the first point of the run's own log (``start`` of a primary run) or at any
    later own point before the change bites, the variant is the same. A fork's reference is
    its own first point, not ``start``: from ``start`` its own changes would apply earlier."""
    result = MetamorphicResult(base.run_id, "point_independence", [item.wire()])
    first = _first_affected(item, base.graph, base.state.executions)
    limit = _point_before(base, first).position if first is not None else None
    own = [p for p in base.index.points() if p.run_id in (None, base.run_id)]
    # a call point stands inside its node: before the change bites only when that node
    # comes before the first one it affects (inside it, the calls before the point are the
    # recorded past, by design)
    later = [p for p in own[1:] if limit is None or (p.position or 0) < limit
             or ((p.position or 0) == limit and p.call is None)]
    at: Any = "start" if not own[0].position else own[0].address()
    if not later:
        result.skipped = ("the change affects the first node: only 'start' comes before it"
                          if at == "start" else "the change affects the fork's first own "
                          "execution or one it inherited: only its first own point comes "
                          "before it")
        return result
    name = "start" if at == "start" else f"seq {own[0].seq} ({own[0].label})"
    reference = run(base.run_id, at=at, changes=[item])
    for point in later:
        other = run(base.run_id, at=point.address(), changes=[item])
        _compare(result, reference, other, name, f"seq {point.seq} ({point.label})")
    return result


def _memoize(base: BaseRun, item: Change, run: Fork) -> MetamorphicResult:
    result = MetamorphicResult(base.run_id, "memoize", [item.wire()])
    first = _first_affected(item, base.graph, base.state.executions)
    at: Any = "start" if first is None or first is base.state.executions[0] else (
        _point_before(base, first).address())
    if isinstance(item, InputPatchChange):  # from the last point: the point moves back
        at = base.index.points()[-1].address()
    where = at if at == "start" else f"seq {at['sequence']}" + (
        "" if at.get("run_id") in (None, base.run_id) else f" of run {at['run_id']}")
    on = run(base.run_id, at=at, changes=[item], memoize=True)
    off = run(base.run_id, at=at, changes=[item], memoize=False)
    _compare(result, on, off, f"memoize on at {where}", "memoize off")
    return result


def _fork_of_fork(base: BaseRun, first: Change, second: Change,
                  run: Fork) -> MetamorphicResult:
    result = MetamorphicResult(base.run_id, "fork_of_fork", [first.wire(), second.wire()])
    bite = _first_affected(first, base.graph, base.state.executions)
    at: Any = "start" if bite is None else _point_before(base, bite).address()
    parent = run(base.run_id, at=at, changes=[first])
    assert parent.state is not None and parent.run_id is not None
    if not parent.state.finished:
        result.skipped = f"the first fork ended {parent.state.status}; it cannot be forked"
        return result
    child = run(parent.run_id, at="start", changes=[second])
    combined = run(base.run_id, at="start", changes=[first, second])
    _compare(result, child, combined, "fork(fork, start, c2)", "fork(root, start, c1 + c2)")
    skip = parent.state.prefix_executions
    own = parent.state.executions[skip:]
    later = _first_affected(second, base.graph, parent.state.executions)
    if own and (later is None or parent.state.executions.index(later) >= skip):
        child = run(parent.run_id, at={"sequence": own[0].start_seq - 1}, changes=[second])
        combined = run(base.run_id, at=at, changes=[first, second])
        _compare(result, child, combined, "fork(fork, its own first point, c2)",
                 "fork(root, the fork's point, c1 + c2)")
    return result


def deep_check(run_id: str, *, store: Store,
               env: Environment | None = None) -> list[MetamorphicResult]:
    """Checks 1, 2 and 4 on ``run_id`` with changes derived from it (see the module doc).

    Raises nothing for a run the checks cannot apply to: each result says ``skipped`` why.
    """
    base = load_base(run_id, store=store, env=env, fold_log=True)  # verify the log itself
    reason = _nondeterministic(base.graph, store)
    items = derived_changes(base)
    if reason or not items:
        why = reason or "the run has no agent node and no read to derive a change from"
        return [MetamorphicResult(run_id, check, [], skipped=why)
                for check in ("point_independence", "memoize", "fork_of_fork")]
    run = _runner(ScratchStore(store), base.env, recorded_human(base.state))
    results = [check(base, item, run) for item in items
               for check in (_point_independence, _memoize)]
    pair = [i for i in items if not isinstance(i, InputPatchChange)]
    if len(pair) > 1:
        results.append(_fork_of_fork(base, pair[1], pair[0], run))
    else:
        results.append(MetamorphicResult(run_id, "fork_of_fork", [i.wire() for i in pair],
                                         skipped="fewer than two node or memory changes "
                                         "could be derived"))
    return results


__all__ = ["FidelityResult", "MetamorphicResult", "deep_check", "derived_changes", "fork_check"]
