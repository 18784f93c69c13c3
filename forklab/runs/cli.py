"""Helpers shared by the fork commands: reading change flags, opening a run's store.

The CLI acts as a local operator (no user, no roles): it reads and forks any run in the
database, synchronously, and prints what the API would return.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from forklab.engine import inputs
from forklab.engine.errors import InvalidInput
from forklab.engine.fork.points import parse_point
from forklab.runs.errors import InvalidArgument, NotFound
from forklab.runs.models import Run
from forklab.runs.store import DjangoStore

CHANGE_FLAGS = ("prompt", "model", "temperature", "set", "delete", "config", "route", "output",
                "tool", "human", "input_patch", "changes")


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


def split_pair(text: str, flag: str, example: str) -> tuple[str, str]:
    target, sep, value = text.partition("=")
    if not sep or not target:
        raise InvalidArgument(f"--{flag} takes TARGET=VALUE, e.g. --{flag} {example}; got {text!r}")
    return target, value


def changes_from_options(options: dict[str, Any]) -> list[dict[str, Any]]:
    """Wire-form changes from the ``fork`` command's flags (validated later by the engine)."""
    changes: list[dict[str, Any]] = []
    for text in options.get("prompt") or []:
        target, value = split_pair(text, "prompt", "write='Three bullets.'")
        changes.append({"kind": "prompt", "target": target, "system_prompt": value})
    for text in options.get("model") or []:
        target, value = split_pair(text, "model", "write=scripted-large")
        changes.append({"kind": "model", "target": target, "model": value})
    for text in options.get("temperature") or []:
        target, value = split_pair(text, "temperature", "write=0.9")
        changes.append({"kind": "temperature", "target": target,
                        "temperature": finite(value, f"--temperature {target}")})
    memory_set = {k: load_json(v, f"--set {k}") for k, v in
                  (split_pair(t, "set", 'draft=\'"hi"\'') for t in options.get("set") or [])}
    if memory_set or options.get("delete"):
        changes.append({"kind": "memory", "set": memory_set, "delete": options.get("delete") or []})
    for flag, kind, key in (("config", "config", "patch"), ("output", "output", "memory"),
                            ("tool", "tool", "result")):
        for text in options.get(flag) or []:
            node, value = split_pair(text, flag, "NODE='{...}'")
            changes.append({"kind": kind, "node": node, key: load_json(value, f"--{flag} {node}")})
    for text in options.get("route") or []:
        source, to = split_pair(text, "route", "route=escalate")
        changes.append({"kind": "route", "from": source, "to": to})
    if options.get("human"):
        changes.append({"kind": "human_response", "decision": options["human"]})
    if options.get("input_patch"):
        changes.append({"kind": "input_patch",
                        "patch": load_json(options["input_patch"], "--input-patch")})
    if options.get("changes"):
        changes.extend(changes_file(options["changes"]))
    inputs.check_json_value(changes, where="changes")  # --prompt, --model, names: strings too
    return changes


def changes_file(path: str) -> list[dict[str, Any]]:
    file = Path(path)
    if not file.is_file():
        raise NotFound(f"changes file {path!r} does not exist", path=path)
    data = load_json(file.read_text(errors="surrogateescape"), f"changes file {path}")
    return data if isinstance(data, list) else [data]


def side_effects(text: str | None) -> Any:
    if text is None or text in ("replay", "block"):
        return text or "replay"
    if text.startswith("allow:"):
        names = [n for n in text[len("allow:"):].split(",") if n]
        return {"allow": True} if names == ["*"] else {"allow": names}
    raise InvalidArgument(f"--side-effects takes replay, block or allow:A,B (allow:* for all); "
                          f"got {text!r}")


def point(text: str | None) -> Any:
    return None if text is None else parse_point(text)


def store_for(run_id: str, *, lease: str | None = None) -> tuple[Run, DjangoStore]:
    """The run and a store of its project; with ``lease``, the runs the command creates are
    leased to it (``forklab.runs.leases.held``), so a killed command's fork is recovered."""
    run = Run.objects.select_related("project").filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"no run {run_id!r}; list runs with: manage.py runs", run_id=run_id)
    return run, DjangoStore(run.project, lease=lease)
