"""Read the composer's POST into a fork request, and put errors back next to their fields.

``read_fork_form`` returns the ForkSpec body plus ``origins`` (which field produced each
change) and field errors for what could not even be parsed (bad JSON, a non-number).
``field_for`` maps a ForklabError raised by the engine or the use cases (``code`` plus its
context: kind, target, field, key, reasons …) to the form field that caused it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.http import QueryDict

from forklab.engine.errors import ForklabError
from forklab.runs.access import DEFAULT_MAX_COST_USD, DEFAULT_MAX_LIVE_CALLS
from forklab.web.composer import HUMAN_DECISIONS, Composer, same


@dataclass
class ForkForm:
    body: dict[str, Any]
    origins: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def changes(self) -> list[dict[str, Any]]:
        return [change for change, _ in self.origins]

    def add(self, change: dict[str, Any], origin: str) -> None:
        self.origins.append((change, origin))


def _json(form: ForkForm, data: QueryDict, name: str, *,
          want: type[dict[str, Any]] | type[list[Any]] | None = None) -> Any:
    text = data.get(name, "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        form.errors[name] = f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        return None
    if want is not None and not isinstance(value, want):
        noun = "a JSON object {…}" if want is dict else "a JSON list […]"
        form.errors[name] = f"expected {noun}, got {type(value).__name__}"
        return None
    return value


def _number(form: ForkForm, data: QueryDict, name: str, cast: type, default: Any) -> Any:
    text = data.get(name, "").strip()
    if not text:
        return default
    try:
        return cast(text)
    except ValueError:
        form.errors[name] = f"expected a number, got {text!r}"
        return default


def _agent_changes(form: ForkForm, composer: Composer, data: QueryDict) -> None:
    for t in composer.targets:
        model = data.get(f"{t.prefix}-model", t.model).strip()
        if model and model != t.model:
            form.add({"kind": "model", "target": t.target, "model": model}, f"{t.prefix}-model")
        prompt = data.get(f"{t.prefix}-prompt", t.system_prompt).replace("\r\n", "\n")
        if prompt != t.system_prompt:
            form.add({"kind": "prompt", "target": t.target, "system_prompt": prompt},
                     f"{t.prefix}-prompt")
        temperature = _number(form, data, f"{t.prefix}-temperature", float, t.temperature)
        if temperature != t.temperature:
            form.add({"kind": "temperature", "target": t.target, "temperature": temperature},
                     f"{t.prefix}-temperature")


def _state_changes(form: ForkForm, composer: Composer, data: QueryDict) -> None:
    memory_set = _json(form, data, "memory_set", want=dict) or {}
    delete = [k.strip() for k in data.get("memory_delete", "").replace("\n", ",").split(",")
              if k.strip()]
    if memory_set or delete:
        form.add({"kind": "memory", "set": memory_set, "delete": delete}, "memory_set")
    output = _json(form, data, "output_memory", want=dict)
    if output is not None and composer.node and not same(output, composer.recorded.writes
                                                          if composer.recorded else None):
        form.add({"kind": "output", "node": composer.node, "memory": output}, "output_memory")
    if data.get("tool_result", "").strip() and composer.node:
        result = _json(form, data, "tool_result")
        if "tool_result" not in form.errors and not same(
                result, json.loads(composer.recorded_tool_result or "null")):
            form.add({"kind": "tool", "node": composer.node, "result": result}, "tool_result")
    route = data.get("route", "")
    if "|" in route:
        source, to = route.split("|", 1)
        form.add({"kind": "route", "from": source, "to": to,
                  "once": data.get("route_once") == "on"}, "route")
    decision = data.get("human_decision", "")
    if decision in HUMAN_DECISIONS:
        human: dict[str, Any] = {"kind": "human_response", "decision": decision}
        human_data = _json(form, data, "human_data")
        if human_data is not None:
            human["data"] = human_data
        form.add(human, "human_decision")
    patch = _json(form, data, "input_patch", want=dict)
    if patch:
        form.add({"kind": "input_patch", "patch": patch}, "input_patch")
    config = _json(form, data, "config_patch", want=dict)
    if config and composer.node:
        form.add({"kind": "config", "node": composer.node, "patch": config}, "config_patch")
    for extra in _json(form, data, "extra_changes", want=list) or []:
        form.add(extra, "extra_changes")


def _policy_budget(form: ForkForm, data: QueryDict) -> dict[str, Any]:
    side = data.get("side_effects", "replay")
    side_effects: Any = side if side in ("replay", "block") else "replay"
    if side == "allow":
        nodes = [n.strip() for n in data.get("allow_nodes", "").split(",") if n.strip()]
        side_effects = {"allow": nodes or True}
    return {
        "policy": {"side_effects": side_effects, "memoize": data.get("memoize") == "on"},
        "budget": {
            "max_live_calls": _number(form, data, "max_live_calls", int, DEFAULT_MAX_LIVE_CALLS),
            "max_cost_usd": _number(form, data, "max_cost_usd", float, DEFAULT_MAX_COST_USD),
        },
        "ignore_budget": data.get("ignore_budget") == "on",
    }


def read_fork_form(composer: Composer, data: QueryDict) -> ForkForm:
    """The fork request a submitted composer describes."""
    form = ForkForm(body={})
    _agent_changes(form, composer, data)
    _state_changes(form, composer, data)
    form.body = {
        "base_run": composer.run.id, "at": {"sequence": composer.seq},
        "changes": form.changes, "label": data.get("label", "").strip(),
        "client_request_id": data.get("client_request_id") or None,
        **_policy_budget(form, data),
    }
    return form


# -- errors -> fields ----------------------------------------------------------------------------

_SPEC_FIELDS = {"budget.max_live_calls": "max_live_calls", "budget.max_cost_usd": "max_cost_usd",
                "label": "label", "policy.side_effects": "side_effects", "at": "at",
                "client_request_id": "form"}
_REASONS = (("write", "side_effects"), ("max_live_calls", "max_live_calls"),
            ("cost", "max_cost_usd"))


def _origin_of(form: ForkForm, test: Any) -> str | None:
    return next((origin for change, origin in form.origins if test(change)), None)


def field_for(error: ForklabError, form: ForkForm) -> str:
    """The form field an error belongs next to (``form`` when no field fits)."""
    ctx, code = error.context, error.code
    if code == "invalid_request":
        name = str(ctx.get("field", ""))
        if name.startswith("changes"):
            return _change_field(form, name)
        return _SPEC_FIELDS.get(name, "form")
    if code in ("invalid_change", "invalid_overrides", "conflicting_changes"):
        return _change_error_field(form, ctx)
    if code == "unpriced_model":
        models = set(ctx.get("models") or [])
        return _origin_of(form, lambda c: c.get("model") in models) or "max_cost_usd"
    if code == "live_budget_exceeded":
        estimate = ctx.get("estimate") or {}
        calls = form.body.get("budget", {}).get("max_live_calls")
        over_calls = calls is not None and estimate.get("live_calls", 0) > calls
        return "max_live_calls" if over_calls else "max_cost_usd"
    if code == "permission_denied":
        reasons = " ".join(ctx.get("reasons") or [])
        return next((name for word, name in _REASONS if word in reasons), "form")
    if code in ("fork_point_not_found", "fork_point_mid_node"):
        return "at"
    return "form"


def _change_field(form: ForkForm, name: str) -> str:
    parts = name.split(".")
    if len(parts) > 1 and parts[1].isdigit() and int(parts[1]) < len(form.origins):
        return form.origins[int(parts[1])][1]
    return "extra_changes"


def _change_error_field(form: ForkForm, ctx: dict[str, Any]) -> str:
    key = ctx.get("key")
    if isinstance(key, list) and key:
        return _conflict_field(form, key)
    kind, target = ctx.get("kind"), ctx.get("target")

    def matches(change: dict[str, Any]) -> bool:
        if kind and change.get("kind") != kind:
            return False
        return target is None or target in (change.get("target"), change.get("node"),
                                            change.get("from"))

    return _origin_of(form, matches) or ("extra_changes" if form.origins else "form")


def _conflict_field(form: ForkForm, key: list[str]) -> str:
    head = key[0]
    test: Callable[[dict[str, Any]], bool]
    if head == "agent" and len(key) == 3:
        test = lambda c: c.get("kind") == key[1] and c.get("target") == key[2]  # noqa: E731
    elif head == "memory":
        test = lambda c: c.get("kind") == "memory" or key[-1] in (c.get("set") or {})  # noqa: E731
    else:
        test = lambda c: c.get("kind") == head  # noqa: E731
    origins = [origin for change, origin in form.origins if test(change)]
    return origins[-1] if origins else "extra_changes"
