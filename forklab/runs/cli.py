"""Helpers shared by the fork commands: reading change flags, opening a run's store.

The CLI acts as a local operator (no user, no roles): it reads and forks any run in the
database, synchronously, and prints what the API would return.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from forklab.engine import inputs
from forklab.engine.calls import looks_like_call_key
from forklab.engine.errors import ForklabError, InvalidInput
from forklab.engine.fork.changes import (
    AGENT_CHANGES,
    Change,
    MemoryChange,
    change,
    parse_change,
    parse_changes,
    wire,
)
from forklab.engine.fork.conflicts import check_conflicts
from forklab.engine.fork.resolve import parse_point
from forklab.engine.fork.wire import AllowList, PointSpec
from forklab.runs.errors import InvalidArgument, NotFound
from forklab.runs.forking import require_recorded
from forklab.runs.models import Run
from forklab.runs.store import DjangoStore

CHANGE_FLAGS = (*AGENT_CHANGES, "set", "delete", "config", "route", "output", "tool", "human",
                "input_patch", "reply", "tool_result", "rerun", "tools", "messages", "changes")


def agent_flag(kind: str) -> str:
    """The flag of an agent-setting kind: ``--model``, ``--max-tokens`` …"""
    return "--" + kind.replace("_", "-")


def agent_change(kind: str, text: str) -> Change:
    """``TARGET=VALUE`` of an agent-setting flag as that kind's change (the engine's
    validation: a bad value is ``invalid_change``; a float setting must be finite)."""
    cls = AGENT_CHANGES[kind]
    flag = agent_flag(kind)
    field = cls.agent_field.upper()
    target, value = split_pair(text, flag[2:], f"T={field} (T: a node, a role or a call key)",
                               f"write={field}")
    typed: Any = value
    if cls.model_fields[cls.agent_field].annotation is float:
        typed = finite(value, f"{flag} {target}")
    aimed = "call" if looks_like_call_key(target) else "target"  # assist#1/turn:2: one call
    return parse_change({"kind": kind, aimed: target, cls.agent_field: typed})


def load_json(text: str, what: str) -> Any:
    """A flag's JSON: malformed is ``invalid_argument``; NaN, Infinity, NUL, lone surrogates,
    nesting or size over the limits are ``invalid_input`` naming the flag."""
    try:
        return inputs.loads(text, where=what)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{what} is not valid JSON: {exc.msg} (column {exc.colno})") from None


def finite(text: str, flag: str, expected: str = "a number") -> float:
    """A flag's number: finite (``nan``, ``inf`` are refused, as ``invalid_input``)."""
    try:
        value = float(text)
    except ValueError:
        raise InvalidArgument(f"{flag} takes {expected}; got {text!r}") from None
    if not math.isfinite(value):
        raise InvalidInput(f"{flag}: {text!r} is not a finite number; give {expected}",
                           path=flag)
    return value


def split_pair(text: str, flag: str, form: str, example: str) -> tuple[str, str]:
    """``A=B`` of a flag whose value has the form ``form`` (as its usage names it)."""
    target, sep, value = text.partition("=")
    if not sep or not target:
        raise InvalidArgument(f"--{flag} takes {form}, e.g. --{flag} {example}; got {text!r}")
    return target, value


def changes_from_options(options: dict[str, Any]) -> list[Change]:
    """The changes the ``fork`` command's flags name, built by the engine's builders (a bad
    value is ``invalid_change``, as from the API); ``--changes FILE`` takes any kind."""
    changes: list[Change] = [agent_change(kind, text) for kind in AGENT_CHANGES
                             for text in options.get(kind) or []]
    memory = memory_change(options.get("set") or [], options.get("delete") or [])
    if memory is not None:
        changes.append(memory)
    for text in options.get("config") or []:
        node, value = split_pair(text, "config", "NODE=JSON", "write='{\"key\": \"value\"}'")
        changes.append(change.config(node, load_json(value, f"--config {node}")))
    for flag, build in (("output", change.output), ("tool", change.tool)):
        for text in options.get(flag) or []:
            target, value = split_pair(text, flag, "NODE[#N]=JSON",
                                       "write#1='{\"key\": \"value\"}'")
            node, occurrence = node_occurrence(target, flag)
            changes.append(build(node, load_json(value, f"--{flag} {target}"), occurrence))
    changes += per_call_changes(options)
    for text in options.get("route") or []:
        changes.append(change.route(*split_pair(text, "route", "FROM=TO", "route=escalate")))
    # repeated, each flag is a change of its own: the engine refuses two that write one thing
    changes += [change.human_response(decision) for decision in options.get("human") or []]
    changes += [change.input_patch(load_json(text, "--input-patch"))
                for text in options.get("input_patch") or []]
    if options.get("changes"):
        changes.extend(changes_file(options["changes"]))
    inputs.check_json_value(wire(changes), where="changes")  # --prompt, --model, names too
    return changes


def node_occurrence(target: str, flag: str) -> tuple[str, int | None]:
    """``NODE`` or ``NODE#N`` (that execution only) of an ``--output`` / ``--tool`` flag."""
    node, sep, occurrence = target.partition("#")
    if not sep:
        return node, None
    if not occurrence.isdigit() or int(occurrence) < 1:
        raise InvalidArgument(f"--{flag} {target}: the execution after '#' is a number from "
                              f"1, e.g. --{flag} {node}#1=...")
    return node, int(occurrence)


def per_call_changes(options: dict[str, Any]) -> list[Change]:
    """``--reply CALL=JSON`` (a JSON object ``{text?, tool_calls?}`` or a JSON string: the
    text), ``--tool-result CALL=JSON``, ``--rerun CALL``, ``--tools AGENT=JSON`` (AGENT a
    node or role, or a call key: that one call), ``--messages CALL=JSON`` (SPEC §6.3)."""
    changes: list[Change] = []
    for text in options.get("reply") or []:
        call, value = split_pair(text, "reply", "CALL=JSON", "assist#1/turn:2='\"Done.\"'")
        reply = load_json(value, f"--reply {call}")
        fields = reply if isinstance(reply, dict) else {"text": reply}
        changes.append(parse_change({"kind": "reply", "call": call, **fields}))
    for text in options.get("tool_result") or []:
        call, value = split_pair(text, "tool-result", "CALL=JSON",
                                 "assist#1/turn:1/tool:1='{\"found\": false}'")
        changes.append(change.tool_result(call, load_json(value, f"--tool-result {call}")))
    changes += [change.rerun(call) for call in options.get("rerun") or []]
    for text in options.get("tools") or []:
        agent, value = split_pair(text, "tools", "AGENT=JSON",
                                  "assist='{\"remove\": [\"issue_refund\"]}'")
        spec = load_json(value, f"--tools {agent}")
        if not isinstance(spec, dict):
            raise InvalidArgument(f"--tools {agent} takes a JSON object with add, remove and "
                                  "tool_choice")
        aimed = "call" if looks_like_call_key(agent) else "agent"
        changes.append(parse_change({"kind": "tools", aimed: agent, **spec}))
    for text in options.get("messages") or []:
        call, value = split_pair(text, "messages", "CALL=JSON",
                                 "agent#1/turn:2='[{\"role\": \"user\", \"content\": \"Hi\"}]'")
        messages = load_json(value, f"--messages {call}")
        if not isinstance(messages, list):
            raise InvalidArgument(f"--messages {call} takes a JSON list of messages "
                                  "({role, content, tool_calls?, tool_call_id?})")
        changes.append(parse_change({"kind": "messages", "call": call,
                                     "messages": messages}))
    return changes


def memory_change(sets: list[str], deletes: list[str]) -> MemoryChange | None:
    """``--set KEY=JSON`` and ``--delete KEY`` flags as one memory change. Two flags on one
    key are ``conflicting_changes``, as two changes of one key are from the API — never the
    last one winning."""
    pieces = [change.memory(set={key: load_json(value, f"--set {key}")}) for key, value in
              (split_pair(text, "set", "KEY=JSON", 'draft=\'"hi"\'') for text in sets)]
    pieces += [change.memory(delete=[key]) for key in deletes]
    check_conflicts(pieces)
    if not pieces:
        return None
    return change.memory(set={k: v for p in pieces for k, v in p.set.items()}, delete=deletes)


def changes_file(path: str) -> list[Change]:
    """One change or a list of them, of any kind, from a JSON file (parsed by the engine)."""
    file = Path(path)
    if not file.is_file():
        raise NotFound(f"changes file {path!r} does not exist", path=path)
    return parse_changes(load_json(file.read_text(errors="surrogateescape"),
                                   f"changes file {path}"))


def variant_changes(name: str, data: Any) -> list[Change]:
    """A sweep variant's change (or list of changes), parsed; an error names the variant."""
    try:
        return parse_changes(data)
    except ForklabError as exc:
        exc.context.setdefault("variant", name)
        raise


def side_effects(text: str | None) -> Literal["replay", "block"] | AllowList:
    """``--side-effects`` as the policy's typed value."""
    if text is None or text == "replay":
        return "replay"
    if text == "block":
        return "block"
    if text.startswith("allow:"):
        names = [n for n in text[len("allow:"):].split(",") if n]
        return AllowList(allow=True if names == ["*"] else names)
    raise InvalidArgument(f"--side-effects takes replay, block or allow:A,B (allow:* for all); "
                          f"got {text!r}")


def point(text: str | None) -> PointSpec:
    """``--at`` as a request names a fork point (a ForkSpec's ``at``)."""
    return None if text is None else parse_point(text)


def store_for(run_id: str, *, lease: str | None = None) -> tuple[Run, DjangoStore]:
    """The run and a store of its project (a run that recorded nothing is refused, saying
    why: ``forking.require_recorded``); with ``lease``, the runs the command creates are
    leased to it (``forklab.runs.leases.held``), so a killed command's fork is recovered."""
    run = Run.objects.select_related("project").filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"no run {run_id!r}; list runs with: forklab runs", run_id=run_id)
    require_recorded(run)  # every command reads the run's log
    return run, DjangoStore(run.project, lease=lease)
