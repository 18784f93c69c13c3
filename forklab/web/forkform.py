"""Read the composer's POST into a fork request, and put errors back next to their fields.

``read_fork_form`` returns what the form says (``spec()`` builds the engine's ForkSpec from
it, typed values in, no JSON body in between) plus ``origins`` (which field produced each
change, built by the engine's change builders) and field errors for what could not even be
parsed (bad JSON, a non-number).
``field_for`` maps a ForklabError raised by the engine or the use cases (``code`` plus its
context: kind, target, field, key, reasons …) to the form field that caused it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from django.http import QueryDict

from forklab.engine.errors import ForklabError
from forklab.engine.fork.changes import Change, change, parse_change
from forklab.engine.fork.wire import (
    DEFAULT_MAX_COST_USD,
    DEFAULT_MAX_LIVE_CALLS,
    AllowList,
    Budget,
    ForkSpec,
    Policy,
    build,
)
from forklab.engine.inputs import json_kind
from forklab.web.composer import HUMAN_DECISIONS, Composer, same
from forklab.web.imported import CallComposer, messages_changed

SideEffects = Literal["replay", "block"] | AllowList


@dataclass
class ForkForm:
    """A submitted composer: the fork request it describes (``spec()`` builds the engine's
    ForkSpec, validated as the API validates a body), each change with the field it came
    from, and the errors of fields that could not even be read."""

    base_run: str = ""
    seq: int = 0
    call: str = ""  # set: the fork starts right before this call (SPEC §6.2)
    label: str = ""
    client_request_id: str | None = None
    side_effects: SideEffects = "replay"
    memoize: bool = False
    max_live_calls: int | None = DEFAULT_MAX_LIVE_CALLS
    max_cost_usd: float | None = DEFAULT_MAX_COST_USD
    ignore_budget: bool = False
    origins: list[tuple[Change, str]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def changes(self) -> list[Change]:
        return [change for change, _ in self.origins]

    def add(self, origin: str, build: Callable[..., Change], *args: Any, **kwargs: Any) -> None:
        """Build a change with an engine builder; a bad value is an error on its field."""
        try:
            self.origins.append((build(*args, **kwargs), origin))
        except ForklabError as exc:
            self.refuse(exc, origin)

    def refuse(self, error: ForklabError, name: str | None = None) -> None:
        """Put ``error`` next to its field (``field_for`` when ``name`` is not given)."""
        name = name or field_for(error, self)
        self.errors[name] = error.message if name in WHOLE_MESSAGE else field_text(error)

    def spec(self) -> ForkSpec:
        return build(
            ForkSpec, base_run=self.base_run,
            at={"before_call": self.call} if self.call else {"sequence": self.seq},
            changes=self.changes, label=self.label, client_request_id=self.client_request_id,
            ignore_budget=self.ignore_budget,
            policy=build(Policy, under=("policy",), side_effects=self.side_effects,
                         memoize=self.memoize),
            budget=build(Budget, under=("budget",), max_live_calls=self.max_live_calls,
                         max_cost_usd=self.max_cost_usd))


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
        form.errors[name] = f"expected {noun}, got {json_kind(value)}"
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
            form.add(f"{t.prefix}-model", change.model, t.target, model)
        prompt = data.get(f"{t.prefix}-prompt", t.system_prompt).replace("\r\n", "\n")
        if prompt != t.system_prompt:
            form.add(f"{t.prefix}-prompt", change.prompt, t.target, prompt)
        temperature = _number(form, data, f"{t.prefix}-temperature", float, t.temperature)
        if temperature != t.temperature:
            form.add(f"{t.prefix}-temperature", change.temperature, t.target, temperature)


def _state_changes(form: ForkForm, composer: Composer, data: QueryDict) -> None:
    memory_set = _json(form, data, "memory_set", want=dict) or {}
    delete = [k.strip() for k in data.get("memory_delete", "").replace("\n", ",").split(",")
              if k.strip()]
    if memory_set or delete:
        form.add("memory_set", change.memory, set=memory_set, delete=delete)
    node = composer.node
    output = _json(form, data, "output_memory", want=dict)
    if output is not None and node and not same(output, composer.recorded.writes
                                                if composer.recorded else None):
        form.add("output_memory", change.output, node, output)
    if data.get("tool_result", "").strip() and node:
        result = _json(form, data, "tool_result")
        if "tool_result" not in form.errors and not same(
                result, json.loads(composer.recorded_tool_result or "null")):
            form.add("tool_result", change.tool, node, result)
    route = data.get("route", "")
    if "|" in route:
        source, to = route.split("|", 1)
        form.add("route", change.route, source, to, once=data.get("route_once") == "on")
    decision = data.get("human_decision", "")
    if decision in HUMAN_DECISIONS:
        human_data = _json(form, data, "human_data")
        updates = _json(form, data, "human_memory_updates", want=dict)
        form.add("human_decision", change.human_response, decision, data=human_data,
                 memory_updates=updates)
    patch = _json(form, data, "input_patch", want=dict)
    if patch:
        form.add("input_patch", change.input_patch, patch)
    config = _json(form, data, "config_patch", want=dict)
    if config and node:
        form.add("config_patch", change.config, node, config)
    for extra in _json(form, data, "extra_changes", want=list) or []:
        # any kind, in its JSON form: a kind the composer has no fields for still composes
        form.add("extra_changes", parse_change, extra)


def _policy_budget(form: ForkForm, data: QueryDict) -> None:
    side = data.get("side_effects", "replay")
    if side == "allow":
        nodes = [n.strip() for n in data.get("allow_nodes", "").split(",") if n.strip()]
        form.side_effects = AllowList(allow=nodes or True)
    elif side == "block":
        form.side_effects = "block"
    form.memoize = data.get("memoize") == "on"
    form.max_live_calls = _number(form, data, "max_live_calls", int, DEFAULT_MAX_LIVE_CALLS)
    form.max_cost_usd = _number(form, data, "max_cost_usd", float, DEFAULT_MAX_COST_USD)
    form.ignore_budget = data.get("ignore_budget") == "on"


def read_fork_form(composer: Composer, data: QueryDict) -> ForkForm:
    """The fork request a submitted composer describes."""
    form = ForkForm(base_run=composer.run.id, seq=composer.seq,
                    call=data.get("at_call", "").strip(),
                    label=data.get("label", "").strip(),
                    client_request_id=data.get("client_request_id") or None)
    _agent_changes(form, composer, data)
    _state_changes(form, composer, data)
    _policy_budget(form, data)
    return form


def read_call_form(composer: CallComposer, data: QueryDict) -> ForkForm:
    """The fork request a submitted call composer (an imported run's call) describes: each
    field that differs from the recorded request is a change of that call (``call``), the
    fork starts right before it."""
    form = ForkForm(base_run=composer.run.id, seq=composer.seq or 0, call=composer.key,
                    label=data.get("label", "").strip(),
                    client_request_id=data.get("client_request_id") or None)
    asked, key = composer.asked, composer.key
    if asked is not None:
        model = data.get("call-model", asked.model).strip()
        provider = composer.provider_for(model, data.get("call-provider", "").strip())
        if model and (model != asked.model or provider):
            form.add("call-model", change.model, key, model, provider)
        prompt = data.get("call-prompt", asked.system_prompt).replace("\r\n", "\n")
        if prompt != asked.system_prompt:
            form.add("call-prompt", change.prompt, key, prompt)
        temperature = _number(form, data, "call-temperature", float, asked.temperature)
        if temperature != asked.temperature:
            form.add("call-temperature", change.temperature, key, temperature)
        messages = _json(form, data, "call-messages", want=list)
        if messages is not None and messages_changed(composer, messages):
            form.add("call-messages", change.messages, key, messages)
    if composer.mode == "one_call" and "call-tools-shown" in data:
        kept = data.getlist("call-tools")
        remove = [t for t in composer.offered_tools if t not in kept]
        add = [t for t in kept if t not in composer.offered_tools]
        if remove or add:
            form.add("call-tools", parse_change,
                     {"kind": "tools", "call": key, "remove": remove, "add": add})
    if composer.mode == "workflow":  # the workflow's arguments, when the trace has none
        patch = _json(form, data, "input_patch", want=dict)
        if patch:
            form.add("input_patch", change.input_patch, patch)
    for extra in _json(form, data, "extra_changes", want=list) or []:
        form.add("extra_changes", parse_change, extra)
    _policy_budget(form, data)
    return form


# -- errors -> fields ----------------------------------------------------------------------------

WHOLE_MESSAGE = frozenset({"form", "extra_changes"})
"""Slots that keep an error's whole message: no one field names what it is about (the form
itself, a JSON list of changes of any kind)."""

_PLAIN = (("Input should be ", "Must be "), ("String should have ", "Must have "),
          ("List should have ", "Must have "), ("Dictionary should have ", "Must have "))


def field_text(error: ForklabError) -> str:
    """``error`` as its field shows it: the reason alone, in plain words (``Must be a finite
    number``), since the field's label already says what it is about; the API's whole message
    (``temperature change, field 'temperature': Input should be …``) repeats the label in
    wire terms. An error without a reason keeps its message."""
    reason = error.context.get("reason")
    if reason is None and error.code == "invalid_request":
        errors = error.context.get("errors") or [{}]
        reason = errors[0].get("msg")
    if not isinstance(reason, str) or not reason:
        return error.message
    for wire, plain in _PLAIN:
        if reason.startswith(wire):
            return plain + reason[len(wire):]
    return reason[0].upper() + reason[1:]


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
        return _origin_of(form, lambda c: getattr(c, "model", None) in models) or "max_cost_usd"
    if code == "live_budget_exceeded":
        estimate = ctx.get("estimate") or {}
        calls = form.max_live_calls
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
        return _conflict_field(form, key, ctx.get("changes") or [])
    kind, target = ctx.get("kind"), ctx.get("target")

    def matches(item: Change) -> bool:
        if kind and item.kind != kind:
            return False
        return target is None or target in (item.scoped_node(), getattr(item, "target", None))

    found = _origin_of(form, matches) or ("extra_changes" if form.origins else "form")
    if found == "human_decision" and str(ctx.get("field", "")).startswith("memory_updates"):
        return "human_memory_updates"  # an undeclared key: next to the box that set it
    return found


def _conflict_field(form: ForkForm, key: list[str], changes: list[Any]) -> str:
    """The field of the later of two conflicting changes: the two the error names, else
    the changes that write the conflicting path."""
    path = tuple(str(step) for step in key)

    def writes(item: Change) -> bool:
        if changes:
            return item.wire() in changes
        return any(p[:len(path)] == path or path[:len(p)] == p for p in item.written_paths())

    origins = [origin for item, origin in form.origins if writes(item)]
    return origins[-1] if origins else "extra_changes"
