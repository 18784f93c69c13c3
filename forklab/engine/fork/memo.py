"""What a fork's tail can be served from: the recording of the run it forks.

:class:`Recording` indexes, once, the executions a tail may reuse:

- by fingerprint (memoization and the side-effect guard — one key for both): every finished
  execution of every run in the base's lineage (the base's logical run and its ancestors'),
  so an execution any of them really made is served, never made again. A fingerprint
  recorded twice with different outputs is *ambiguous*: memoization skips it, the guard
  serves the base's own execution (or the first recorded);
- by (node, occurrence): the base's logical run, for labels and per-call reuse — a call is
  compared with the recorded call of the same node execution, role and instance;
- child recordings: the child runs a subgraph node started in the base, for a child that
  runs again in the tail.

:class:`SharedMemo` offers the executions of a sweep's variants to each other — only what a
variant really executed (:func:`executed`): never what one variant's change supplied (an
``output`` substitution, a ``tool`` result, a forced route, a gate's answer), which the other
variants do not carry. So every variant of a sweep has exactly the outcome of the same fork
run alone (budgets included: the fork oracle counts a sibling's paid call against the
variant's budget, ``ForkOracle._from_sibling``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from forklab.engine.actions import (
    AgentAnswer,
    CallFailure,
    ChildOutcome,
    ChildStarted,
    HumanDecision,
    ToolCall,
    ToolResult,
    call_of,
    call_records,
)
from forklab.engine.canonical import canonical_json
from forklab.engine.events import AnyEvent
from forklab.engine.state import Execution, RunState

FINISHED = ("completed", "failed")


def executed(execution: Execution) -> bool:
    """Whether ``execution`` is what its node did under its inputs alone — nothing in it was
    supplied by a change (no action labelled ``simulated``: a substituted output or tool
    result, a forced route, a change's answer) and it is not an approval gate, whose answer
    comes from a person or a change, never from the gate's inputs."""
    if execution.kind == "approval":
        return False
    return not any(getattr(action, "label", None) == "simulated"
                   for action in execution.actions)


class SharedMemo:
    """Executions recorded by the variants of one sweep, by fingerprint (thread-safe).

    Invariant: it holds only executions a variant really made (:func:`executed`), so a hit
    serves a variant what executing the node under the same fingerprint gave a sibling —
    never what a sibling's change supplied."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_fp: dict[str, Execution] = {}
        self._ambiguous: set[str] = set()

    def add(self, execution: Execution) -> None:
        """Offer a finished execution to the other variants; a supplied one is ignored."""
        if not executed(execution):
            return
        with self._lock:
            index_execution(self._by_fp, self._ambiguous, execution)

    def get(self, fp: str) -> Execution | None:
        with self._lock:
            return None if fp in self._ambiguous else self._by_fp.get(fp)


def _outputs(execution: Execution) -> str:
    return canonical_json({"writes": execution.writes, "deletes": execution.deletes,
                           "route": execution.route, "status": execution.status,
                           "error": execution.error})


def index_execution(by_fp: dict[str, Execution], ambiguous: set[str], ex: Execution) -> None:
    """Add one finished execution; a fingerprint seen with two outputs is never reused.

    Failed executions are indexed too: a null fork re-serves the recorded failure instead of
    calling the failing tool again. So are memoized ones (a fork's memo hits carry the
    recorded actions and outputs), so a null fork of a fork is free as well.
    """
    if ex.status not in FINISHED:
        return
    known = by_fp.get(ex.fingerprint)
    if known is not None and _outputs(known) != _outputs(ex):
        ambiguous.add(ex.fingerprint)
    by_fp.setdefault(ex.fingerprint, ex)


def _agent_action(ex: Execution | None, key: str) -> AgentAnswer | CallFailure | None:
    for action in ex.actions if ex else ():
        if (isinstance(action, (AgentAnswer, CallFailure))
                and (isinstance(action, AgentAnswer) or action.kind == "agent")
                and call_of(action) == key):
            return action
    return None


def _chosen_tool(ex: Execution | None,
                 key: str) -> tuple[str | None, str | None, ToolResult | CallFailure | None]:
    """(tool name, args hash, result or failure) of the chosen tool call ``key`` in ``ex``."""
    name: str | None = None
    args_hash: str | None = None
    for action in call_records(ex.actions if ex else (), key):
        if isinstance(action, ToolCall):
            name, args_hash = action.tool, action.args_hash
        elif isinstance(action, (ToolResult, CallFailure)):
            return name, args_hash, action
    return name, args_hash, None


def _index_tool_effects(effects: dict[tuple[str, str], ToolResult], ex: Execution) -> None:
    """Every chosen tool call of ``ex`` that returned, by (tool name, args hash)."""
    args: dict[str, tuple[str, str]] = {}
    for action in ex.actions:
        if isinstance(action, ToolCall) and action.call is not None:
            args[action.call] = (action.tool, action.args_hash)
        elif isinstance(action, ToolResult) and action.call in args:
            effects.setdefault(args[action.call], action)


RunLoader = Callable[[str], RunState | None]


@dataclass
class Recording:
    """The base run's executions, indexed for memo, the guard, labels and child runs."""

    by_fingerprint: dict[str, Execution] = field(default_factory=dict)
    ambiguous: set[str] = field(default_factory=set)
    effects: dict[str, Execution] = field(default_factory=dict)
    by_occurrence: dict[tuple[str, int], Execution] = field(default_factory=dict)
    load_run: RunLoader | None = None
    tool_effects: dict[tuple[str, str], ToolResult] = field(default_factory=dict)
    # the base's log, then its ancestors': only read to say how a prefix call diverged
    # (``requests_diff.recorded_request``), never on the way of a call that matches
    logs: tuple[Sequence[AnyEvent], ...] = ()

    @classmethod
    def of(cls, state: RunState, *, lineage: Sequence[RunState] = (),
           load_run: RunLoader | None = None) -> Recording:
        """Index ``state`` (the base) and the states of its ``lineage`` (its ancestors).

        The base's own executions come first: an ancestor's execution fills in only a
        fingerprint the base has none of. The base is the recording being forked — where it
        and an ancestor recorded the same inputs with other outputs (a gate answered
        otherwise in a fork of it, a sampled model), serving the base's is what reproduces
        it; counting them as one ambiguous fingerprint made a null fork of a fork answered
        at a gate pause there again."""
        rec = cls(load_run=load_run)
        for ex in state.executions:
            rec.by_occurrence[(ex.node, ex.occurrence)] = ex
            index_execution(rec.by_fingerprint, rec.ambiguous, ex)
        inherited: dict[str, Execution] = {}
        unclear: set[str] = set()
        for run in lineage:
            for ex in run.executions:
                if ex.fingerprint not in rec.by_fingerprint:
                    index_execution(inherited, unclear, ex)
        rec.by_fingerprint.update(inherited)
        rec.ambiguous |= unclear
        for run in (state, *lineage):
            for ex in run.executions:
                if ex.status in FINISHED:
                    rec.effects.setdefault(ex.fingerprint, ex)
                _index_tool_effects(rec.tool_effects, ex)
        return rec

    def memo(self, fp: str) -> Execution | None:
        """A finished execution to serve whole, unless the fingerprint is ambiguous."""
        return None if fp in self.ambiguous else self.by_fingerprint.get(fp)

    def effect(self, fp: str) -> Execution | None:
        """The finished execution whose recorded result the guard serves for ``fp``."""
        return self.effects.get(fp)

    def agent_call(self, node: str, occurrence: int,
                   key: str) -> AgentAnswer | CallFailure | None:
        """The recorded answer (or failure) of model call ``key`` in the base, if any."""
        return _agent_action(self.by_occurrence.get((node, occurrence)), key)

    def chosen_tool(self, node: str, occurrence: int,
                    key: str) -> tuple[str | None, str | None, ToolResult | CallFailure | None]:
        """(tool, args hash, outcome) of the chosen tool call ``key`` in the base."""
        return _chosen_tool(self.by_occurrence.get((node, occurrence)), key)

    def gate_answer(self, node: str, occurrence: int, key: str) -> HumanDecision | None:
        """The answer the base recorded at the gate of tool call ``key``, if any."""
        ex = self.by_occurrence.get((node, occurrence))
        return next((a for a in (ex.actions if ex else ())
                     if isinstance(a, HumanDecision) and a.call == key), None)

    def tool_effect(self, tool: str, args_hash: str) -> ToolResult | None:
        """A result the base's lineage recorded for ``tool`` called with these arguments
        (what the side-effect guard serves for a write tool the model chose)."""
        return self.tool_effects.get((tool, args_hash))

    def tool_call(self, node: str,
                  occurrence: int) -> tuple[str | None, ToolResult | CallFailure | None]:
        """(args hash, result or failure record) of that tool call in the base."""
        ex = self.by_occurrence.get((node, occurrence))
        args_hash: str | None = None
        outcome: ToolResult | CallFailure | None = None
        for action in ex.actions if ex else ():
            if isinstance(action, ToolCall):
                args_hash = action.args_hash
            elif isinstance(action, ToolResult) or (isinstance(action, CallFailure)
                                                    and action.kind == "tool"):
                outcome = action
        return args_hash, outcome

    def child(self, node: str, occurrence: int) -> Recording:
        """The recording of the child run that execution started in the base (may be empty)."""
        ex = self.by_occurrence.get((node, occurrence))
        child_id = next((a.child_run_id for a in (ex.actions if ex else ())
                         if isinstance(a, (ChildStarted, ChildOutcome))
                         and a.child_run_id != "(simulated)"), None)
        state = self.load_run(child_id) if child_id and self.load_run else None
        if state is None:
            return Recording(load_run=self.load_run)
        return Recording.of(state, load_run=self.load_run)
