"""An agent node execution read as a conversation thread (SPEC §6.5): each model turn with
the messages it was sent, its reply, the tool calls it asked for with their results, tokens,
cost and provenance label — every turn and tool call under its full call key.

:func:`build_thread` is pure (a step's events in, plain data out); :func:`conversation`
finds the step in a run's logical log (``forklab.runs.steps``: an inherited execution is
read from the base's log). A served execution (``node.reused``) re-emits answers, not
requests, so its turns carry no messages (``served`` says so).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from forklab.engine.calls import call_key, is_code_tool_call, turn_call
from forklab.engine.canonical import canonical_equals
from forklab.engine.traces.replayable import ImportedCalls
from forklab.runs import steps
from forklab.runs.errors import NotFound
from forklab.runs.models import Run
from forklab.runs.queries import graph_of
from forklab.runs.serializers_json import imported_calls

TURN_EVENTS = frozenset({"agent.requested", "agent.responded", "tool.called", "tool.returned",
                         "call.failed", "human.requested", "human.answered"})


@dataclass
class ToolUse:
    """One tool call a model turn asked for, and what came of it."""

    key: str  # assist#1/turn:1/tool:1
    call: str  # turn:1/tool:1
    tool: str
    call_id: str | None = None
    effect: str = ""
    arguments: Any = None
    result: Any = None
    error: dict[str, Any] | None = None
    label: str = ""
    seq: int = 0
    done: bool = False  # a result or an error was recorded
    asks: list[Turn] = field(default_factory=list)  # models the tool asked (``…/ask:1``)
    approval: dict[str, Any] | None = None  # a gated tool's {decision, answered_by, label}
    # an imported run's call: replayable or not (None: not imported); when not, what was
    # not captured and the setting that captures it (forklab.engine.traces.replayable)
    replayable: bool | None = None
    missing: list[str] = field(default_factory=list)
    capture_hint: str | None = None


@dataclass
class Turn:
    """One model call of the execution."""

    key: str  # assist#1/turn:2
    call: str  # turn:2
    seq: int = 0
    model: str = ""
    earlier: list[dict[str, Any]] = field(default_factory=list)  # history, shown collapsed
    new: list[dict[str, Any]] = field(default_factory=list)  # after the last assistant message
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    latency_ms: float = 0.0
    label: str = ""
    error: dict[str, Any] | None = None
    answered: bool = False
    tools: list[ToolUse] = field(default_factory=list)
    replayable: bool | None = None  # as ToolUse's
    missing: list[str] = field(default_factory=list)
    capture_hint: str | None = None


@dataclass
class Thread:
    """An agent execution's turns in call order."""

    run_id: str  # whose log the events were read from
    node: str
    occurrence: int
    turns: list[Turn] = field(default_factory=list)
    system_prompt: str = ""
    inherited_from: str | None = None
    served: bool = False  # replayed from a recording: requests were not re-emitted

    @property
    def looped(self) -> bool:
        """The model asked for at least one tool call."""
        return any(t.tools for t in self.turns)

    def to_wire(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "node": self.node, "occurrence": self.occurrence,
                "inherited_from": self.inherited_from, "served": self.served,
                "system_prompt": self.system_prompt,
                "turns": [asdict(t) for t in self.turns]}


def split_history(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]],
                                                           list[dict[str, Any]]]:
    """(earlier, new): ``new`` is what follows the last assistant message (this turn's user
    prompt or tool results), ``earlier`` the history before it, collapsed on the page."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    if last < 0:  # a first turn: history (if any) then the rendered prompt
        return messages[:-1], messages[-1:]
    return messages[:last + 1], messages[last + 1:]


def _turn_of(tool_call: str) -> str:
    return tool_call.rsplit("/tool:", 1)[0]


def _json_of(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text


def _tool_of(ask: str) -> str | None:
    """The tool call a model was asked from (``turn:1/tool:1`` of ``turn:1/tool:1/ask:1``);
    None for a model turn."""
    head, _, last = ask.rpartition("/")
    return head if last.startswith("ask:") and "/tool:" in head else None


class _Builder:
    def __init__(self, node: str, occurrence: int) -> None:
        self.node, self.occurrence = node, occurrence
        self.turns: dict[str, Turn] = {}
        self.tools: dict[str, ToolUse] = {}
        self.system_prompt = ""
        self.requested = False
        self.code_tools: list[ToolUse] = []  # a workflow's tool calls, in the order made

    def key(self, call: str) -> str:
        return call_key(self.node, self.occurrence, call) or call

    def turn(self, call: str, seq: int) -> Turn:
        """The model call ``call``: a turn of the loop, or an ask of one of its tools."""
        if call not in self.turns:
            made = Turn(key=self.key(call), call=call, seq=seq)
            self.turns[call] = made
            tool = _tool_of(call)
            if tool is not None and tool in self.tools:
                self.tools[tool].asks.append(made)
        return self.turns[call]

    def loop_turns(self) -> list[Turn]:
        return sorted((t for c, t in self.turns.items() if _tool_of(c) is None),
                      key=lambda t: t.seq)

    def tool(self, call: str, tool: str, seq: int) -> ToolUse:
        if call not in self.tools:
            use = ToolUse(key=self.key(call), call=call, tool=tool, seq=seq)
            use.asks = [t for c, t in self.turns.items() if _tool_of(c) == call]
            self.tools[call] = use
            if is_code_tool_call(call):  # no turn in its key: found by content
                self.code_tools.append(use)  # placed by :meth:`place_code_tools`
            else:
                self.turn(_turn_of(call), seq).tools.append(use)
        return self.tools[call]

    def place_code_tools(self) -> None:
        """Put each workflow tool call under the model turn whose reply asked for it: the
        first tool call of an earlier reply not yet taken that names the tool with equal
        arguments, else the one whose id a later request's ``tool`` message answers with
        this call's result. Taken in call order; a call nothing asked for (the code's own
        decision) stays an entry of its own, keyed by its call."""
        taken: set[tuple[str, int]] = set()
        asked = [(t, i, c) for t in self.loop_turns() for i, c in enumerate(t.tool_calls)]
        answered: dict[str, list[Any]] = {}  # tool_call_id: the contents answering it
        for turn in self.loop_turns():
            for message in (*turn.earlier, *turn.new):
                if message.get("role") == "tool" and message.get("tool_call_id"):
                    answered.setdefault(str(message["tool_call_id"]), []).append(
                        _json_of(message.get("content")))
        for use in sorted(self.code_tools, key=lambda u: u.seq):
            found = next(((t, i) for t, i, c in asked if (t.call, i) not in taken
                          and t.seq < use.seq and c.get("name") == use.tool
                          and canonical_equals(_json_of(c.get("arguments")), use.arguments)),
                         None)
            if found is None and use.done and use.error is None:
                found = next(((t, i) for t, i, c in asked if (t.call, i) not in taken
                              and t.seq < use.seq and c.get("name") == use.tool
                              and any(canonical_equals(content, use.result) for content
                                      in answered.get(str(c.get("id")), ()))), None)
            if found is None:
                self.turn(use.call, use.seq).tools.append(use)
                continue
            turn, index = found
            taken.add((turn.call, index))
            turn.tools.append(use)

    def add(self, seq: int, kind: str, p: dict[str, Any]) -> None:
        agent_call = p.get("call") or turn_call(1, p.get("role"), p.get("index"))
        if kind == "agent.requested":
            self.requested = True
            turn = self.turn(agent_call, seq)
            turn.model = str(p.get("model") or "")
            turn.earlier, turn.new = split_history(list(p.get("messages") or []))
            self.system_prompt = self.system_prompt or str(p.get("system_prompt") or "")
        elif kind == "agent.responded":
            turn = self.turn(agent_call, seq)
            turn.model = turn.model or str(p.get("model") or "")
            turn.text = str(p.get("text") or "")
            turn.tool_calls = list(p.get("tool_calls") or [])
            turn.answered = True
            for name in ("finish_reason", "input_tokens", "output_tokens", "cost_usd",
                         "latency_ms", "label"):
                if p.get(name) is not None:
                    setattr(turn, name, p[name])
        elif kind == "tool.called" and p.get("call"):
            use = self.tool(str(p["call"]), str(p.get("tool") or ""), seq)
            use.tool = use.tool or str(p.get("tool") or "")
            use.call_id, use.effect, use.arguments = p.get("call_id"), str(
                p.get("effect") or ""), p.get("args")
        elif kind == "tool.returned" and p.get("call") in self.tools:
            use = self.tools[str(p["call"])]
            use.result, use.label, use.done = p.get("result"), str(p.get("label") or ""), True
        elif kind == "call.failed":
            self.failed(seq, p, agent_call)
        elif kind in ("human.requested", "human.answered") and p.get("call"):
            self.gate(seq, kind, p)

    def gate(self, seq: int, kind: str, p: dict[str, Any]) -> None:
        """A gated tool call's approval (asked before the tool runs, so it makes the call
        from the question's context when the tool has not been called yet)."""
        context = p.get("context") or {}
        use = self.tool(str(p["call"]), str(context.get("tool") or ""), seq)
        if kind == "human.requested":
            use.arguments = use.arguments if use.arguments is not None else context.get("args")
            use.approval = {"decision": None, "answered_by": "", "label": ""}
        else:
            use.approval = {"decision": p.get("decision"),
                            "answered_by": p.get("answered_by") or "",
                            "label": p.get("label") or ""}

    def failed(self, seq: int, p: dict[str, Any], agent_call: str) -> None:
        if p.get("kind") == "tool" and p.get("call") in self.tools:
            use = self.tools[str(p["call"])]
            use.error, use.label, use.done = p.get("error"), str(p.get("label") or ""), True
        elif p.get("kind") == "agent":
            turn = self.turn(agent_call, seq)
            turn.error, turn.label, turn.answered = p.get("error"), str(p.get("label") or ""), \
                True


def build_thread(events: list[dict[str, Any]], *, run_id: str, node: str, occurrence: int,
                 inherited_from: str | None = None) -> Thread | None:
    """The thread of execution ``node#occurrence`` from its events (the Event JSON shape, a
    ``node.reused`` already expanded); None when it made no model call."""
    builder = _Builder(node, occurrence)
    for event in events:
        if event.get("type") in TURN_EVENTS and event.get("node") == node:
            builder.add(int(event["seq"]), str(event["type"]), event.get("payload") or {})
    builder.place_code_tools()
    turns = builder.loop_turns()
    if not turns:
        return None
    return Thread(run_id=run_id, node=node, occurrence=occurrence, turns=turns,
                  system_prompt=builder.system_prompt, inherited_from=inherited_from,
                  served=not builder.requested)


def conversation(run: Run, node: str, occurrence: int) -> Thread | None:
    """The thread of ``node#occurrence`` in ``run``'s logical run; None when that execution
    never ran or made no model call."""
    where = steps.locate(run, node, occurrence)
    if where is None:
        return None
    thread = build_thread(steps.events(where), run_id=where.run_id, node=node,
                          occurrence=occurrence, inherited_from=where.inherited_from)
    if thread is not None and thread.served:
        effects_from_graph(thread, run)
    if thread is not None:
        imported = imported_calls(where.run_id)
        if imported is not None:
            mark_replayable(thread, imported)
    return thread


def mark_replayable(thread: Thread, imported: ImportedCalls) -> None:
    """Each turn and tool call of an imported run's thread says whether it is replayable
    (and, when not, what is missing and how to turn capture on)."""
    def mark(call: Turn | ToolUse) -> None:
        found = imported.of(call.key)
        if found is not None:
            call.replayable = bool(found["replayable"])
            call.missing = list(found.get("missing") or [])
            call.capture_hint = found.get("capture_hint")

    for turn in thread.turns:
        mark(turn)
        for use in turn.tools:
            mark(use)


def effects_from_graph(thread: Thread, run: Run) -> None:
    """A served tool call's event carries no effect (``reused_form``): take it from the
    graph's tools registry, so a served write still reads as one."""
    try:
        registry = graph_of(run).tools or {}
    except NotFound:
        return
    for turn in thread.turns:
        for use in turn.tools:
            if not use.effect and use.tool in registry:
                use.effect = registry[use.tool].effect
