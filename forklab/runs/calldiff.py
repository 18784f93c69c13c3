"""Two runs' agent loops aligned call by call (SPEC §6.5): every model turn and tool call
under its call key, ``same`` / ``changed`` / ``inserted`` / ``skipped``, so "the refund call
is gone and the answer changed" reads at a glance.

Pure: :func:`loop_calls` reads a folded state's action records, :func:`align_calls` aligns
two lists of :class:`CallFacts`. Keys do not depend on provider call ids (SPEC §6.2), so a
fork's calls line up with its base's by key alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from forklab.engine.actions import AgentAnswer, CallFailure, ToolCall, ToolResult, call_of
from forklab.engine.calls import call_key
from forklab.engine.canonical import canonical_json
from forklab.engine.state import Execution, RunState

Op = Literal["same", "changed", "inserted", "skipped", "not_reexecuted"]
"""``not_reexecuted``: a base call after a one-call fork's call (SPEC §8 (a)): the fork
ended after re-asking its call, so the call was not made again — not gone."""


@dataclass(frozen=True)
class CallFacts:
    """What identifies one call and what came of it."""

    key: str  # assist#1/turn:2 or assist#1/turn:2/tool:1
    kind: Literal["turn", "tool", "ask"]  # ask: a model asked from inside a tool
    tool: str | None = None
    sent: str = ""  # a turn's request hash, a tool call's args hash
    outcome: Any = None  # a turn's {text, tool_calls}; a tool call's result or {error}
    label: str = ""

    @property
    def execution(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def text(self) -> str:
        """A turn's reply text ('' for a tool call)."""
        return str(self.outcome.get("text") or "") if isinstance(self.outcome, dict) \
            and self.kind != "tool" else ""


@dataclass(frozen=True)
class CallRow:
    """One aligned call: the base's and the variant's facts (None on the side without it)."""

    op: Op
    key: str
    base: CallFacts | None
    variant: CallFacts | None
    why: str = ""  # for ``changed``: what differs (arguments, result, request, reply)

    @property
    def facts(self) -> CallFacts:
        found = self.variant or self.base
        assert found is not None
        return found


def _kind(key: str) -> Literal["turn", "tool", "ask"]:
    last = key.rsplit("/", 1)[-1]
    return "tool" if last.startswith("tool:") else "ask" if last.startswith("ask:") else "turn"


def _facts(execution: Execution) -> list[CallFacts]:
    """The loop calls of one execution, in recorded order (tool-node calls have no key)."""
    found: dict[str, dict[str, Any]] = {}
    for record in execution.actions:
        if not isinstance(record, (AgentAnswer, CallFailure, ToolCall, ToolResult)):
            continue
        local = call_of(record)
        key = call_key(execution.node, execution.occurrence, local) if local else None
        if key is None:
            continue
        entry = found.setdefault(key, {"key": key, "kind": _kind(key)})
        match record:
            case AgentAnswer():
                entry.update(sent=record.request_hash, label=record.label, outcome={
                    "text": record.text, "tool_calls": [
                        {"name": c.get("name"), "arguments": c.get("arguments")}
                        for c in record.tool_calls or ()]})
            case ToolCall():
                entry.update(tool=record.tool, sent=record.args_hash)
            case ToolResult():
                entry.update(outcome=record.result, label=record.label)
            case CallFailure():
                entry.update(outcome={"error": record.error}, label=record.label)
                if record.kind == "agent":
                    entry["sent"] = record.request_hash or ""
    return [CallFacts(**entry) for entry in found.values()]


def loop_calls(state: RunState, *, every: bool = False) -> list[CallFacts]:
    """The calls of every execution that ran a tool loop (asked for at least one tool), in
    execution order; executions with a single model call and tool nodes are left out
    (``every``: they are kept too — a one-call fork may re-ask a lone call)."""
    out: list[CallFacts] = []
    for execution in state.executions:
        facts = _facts(execution)
        if every or any(f.kind == "tool" for f in facts):
            out += facts
    return out


def _compare(base: CallFacts, variant: CallFacts) -> tuple[Op, str]:
    differs = []
    if base.tool != variant.tool:
        differs.append("tool")
    if base.sent != variant.sent:
        differs.append("arguments" if base.kind == "tool" else "request")
    if canonical_json(base.outcome) != canonical_json(variant.outcome):
        differs.append("result" if base.kind == "tool" else "reply")
    return ("changed", ", ".join(differs)) if differs else ("same", "")


def align_calls(base: list[CallFacts], variant: list[CallFacts]) -> list[CallRow]:
    """``base`` and ``variant`` aligned by call key, in the variant's order with each call
    only the base made placed after the base call before it. Only executions either side ran
    as a loop are compared: an execution one side ran as a loop and the other did not shows
    its calls as inserted or skipped."""
    in_base = {f.key: f for f in base}
    in_variant = {f.key: f for f in variant}
    rows: list[CallRow] = []
    done: set[str] = set()
    i = j = 0
    while i < len(base) or j < len(variant):
        if i < len(base) and base[i].key in done:
            i += 1
        elif i < len(base) and base[i].key not in in_variant:
            rows.append(CallRow("skipped", base[i].key, base[i], None))
            i += 1
        elif j < len(variant) and variant[j].key in done:
            j += 1
        elif j < len(variant) and variant[j].key not in in_base:
            rows.append(CallRow("inserted", variant[j].key, None, variant[j]))
            j += 1
        else:  # a key both made: the next one of the variant (or the base when it ran out)
            key = variant[j].key if j < len(variant) else base[i].key
            op, why = _compare(in_base[key], in_variant[key])
            rows.append(CallRow(op, key, in_base[key], in_variant[key], why))
            done.add(key)
    return rows


def summary(rows: list[CallRow]) -> list[str]:
    """One short sentence per call that differs, e.g. ``issue_refund (assist#1/turn:2/tool:1)
    is gone`` and ``the reply of assist#1/turn:3 changed``."""
    out = []
    for row in rows:
        tool = row.facts.kind == "tool"
        what = (f"the {row.facts.tool} call ({row.key})" if tool else
                f"{'turn' if row.facts.kind == 'turn' else 'the ask'} {row.key}")
        if row.op == "not_reexecuted":
            continue  # one line for all of them, below
        if row.op == "skipped":
            out.append(f"{what} is gone")
        elif row.op == "inserted":
            out.append(f"{what} is new")
        elif row.op == "changed" and not tool and "reply" in row.why:
            out.append(f"the reply of {row.key} changed")
        elif row.op == "changed":
            out.append(f"{what} changed: {row.why}")
    later = sum(1 for row in rows if row.op == "not_reexecuted")
    if later:
        out.append(f"{later} later call(s) of the base were not re-executed (a one-call "
                   "fork asks only its call)")
    return out


@dataclass(frozen=True)
class CallDiff:
    rows: list[CallRow]
    summary: list[str]

    @property
    def counts(self) -> dict[str, int]:
        return {op: sum(1 for r in self.rows if r.op == op)
                for op in ("same", "changed", "inserted", "skipped", "not_reexecuted")}


def call_diff(base: RunState, variant: RunState) -> CallDiff | None:
    """The loop calls of two states aligned, with the summary; None when neither ran a
    tool loop."""
    one_call = variant.fork.one_call if variant.fork is not None else None
    rows = align_calls(loop_calls(base, every=bool(one_call)),
                       loop_calls(variant, every=bool(one_call)))
    if one_call:  # the fork ended after its call: what the base did later was not redone
        rows = [CallRow("not_reexecuted", r.key, r.base, None) if r.op == "skipped" else r
                for r in rows]
    return CallDiff(rows=rows, summary=summary(rows)) if rows else None
