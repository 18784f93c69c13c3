"""What the dashboard offers to fork on a run imported from a trace (SPEC §8), and the
composer of one call.

An imported run is not forked at its node boundaries: its graph only describes the trace.

- **Unmapped** (``one_call``): a fork re-asks one replayable model call. The run page lists
  those calls (each opening the composer before it); its timeline markers only inspect;
  an inspect-only call offers no fork, its badge says what is missing and the setting that
  captures it.
- **Mapped** to a registered workflow by ``FORKLAB_WORKFLOW_MAP`` (``workflow``): a fork
  re-executes the code with the trace answering the prefix; its points are the workflow's
  call keys (``before:support#1/openai:2``, worked out as ``forking.fork_points_of`` does:
  nothing is stored until a fork is asked for). A point after an inspect-only call cannot
  have its prefix answered: it is listed, not linked.
- A **workflow base** (``wf-…``) is the frozen recording a mapped fork forks: its page
  names the imported run it was made from.

:class:`CallComposer` is the composer opened before one call of an imported run: fields for
the changes that work there (model and provider, system prompt, temperature, messages;
the tools offered for a one-call fork) — never node-level fields a fork would refuse.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlencode

from django.urls import reverse

from forklab.engine.errors import ForklabError
from forklab.engine.events import AgentRequested, AnyEvent, TraceImported
from forklab.engine.fork import fork_points as engine_fork_points
from forklab.engine.fork.wire import DEFAULT_MAX_COST_USD, DEFAULT_MAX_LIVE_CALLS
from forklab.engine.traces.replayable import badge
from forklab.runs import imported_forks
from forklab.runs.models import Event, Run
from forklab.runs.serializers_json import imported_calls
from forklab.runs.store import DjangoStore
from forklab.web.composer import SCRIPTED_PREFIX, pretty

Mode = Literal["one_call", "workflow"]


@dataclass(frozen=True)
class CallPoint:
    """One call a fork of an imported run can start before."""

    key: str
    model: bool  # a model call (a mapped workflow's tool call is a point too)
    replayable: bool
    badge: str
    url: str  # the composer before it; "" when a fork there would be refused
    why_not: str = ""  # why there is no link
    source: str = ""  # mapped: the imported call it came from


@dataclass
class ImportedForks:
    """How the run page offers forks of an imported run."""

    mode: Mode
    points: list[CallPoint] = field(default_factory=list)
    name: str = ""  # mapped: the trace's name the map names
    workflow: str = ""  # mapped: what it maps it to (module:function, or a workflow id)
    error: str = ""  # mapped: why no point can be listed (workflow_map_invalid …)

    @property
    def forkable(self) -> list[CallPoint]:
        return [p for p in self.points if p.url]


def call_key(event: AgentRequested) -> str:
    """The full call key of a recorded request (``node#occurrence/turn:T``)."""
    return f"{event.node}#{event.occurrence}/{event.call or 'turn:1'}"


def _infos(events: list[AnyEvent]) -> dict[str, dict[str, Any]]:
    trace = next((e for e in events[:3] if isinstance(e, TraceImported)), None)
    return {str(c["call"]): c for c in (trace.calls if trace else ()) if c.get("call")}


def _status(info: dict[str, Any] | None) -> tuple[bool, str]:
    if info is None:
        return True, ""
    return bool(info.get("replayable")), badge(info)


def _is_model_call(key: str) -> bool:
    part = key.rsplit("/", 1)[-1]
    return part.startswith("turn:") or not part.startswith("tool:")


def compose_url(run: Run, key: str, seq: int | None = None) -> str:
    query: dict[str, Any] = {"at": seq} if seq is not None else {}
    return f"{reverse('compose', args=[run.id])}?{urlencode({**query, 'call': key})}"


def events_of(run: Run, mode: Mode) -> list[AnyEvent]:
    """The log forks of ``run`` address: its own (one-call), or its workflow base's as it
    would be stored (mapped; ``workflow_map_invalid`` & co. when it cannot be made)."""
    if mode == "workflow":
        return imported_forks.recording_events(run)
    return DjangoStore(run.project).read(run.id)


def imported_forks_of(run: Run, *, forkable: bool) -> ImportedForks | None:
    """What the run page offers to fork on ``run``; None for a run not imported.
    ``forkable``: the reader may fork (else the points are listed without links)."""
    if not run.trace_id:
        return None
    found = imported_forks.mapped(run)
    if found is None:
        return _one_call_points(run, forkable=forkable)
    view = ImportedForks(mode="workflow", name=found[0], workflow=found[1])
    try:
        events = events_of(run, "workflow")
    except ForklabError as exc:
        view.error = exc.message
        return view
    infos = _infos(events)
    blocked = ""  # an inspect-only call before a point: its prefix cannot be answered
    for point in engine_fork_points(events):
        if point.call is None:
            continue
        replayable, text = _status(infos.get(point.call))
        url = compose_url(run, point.call) if forkable and not blocked else ""
        source = str((infos.get(point.call) or {}).get("imported_call") or "")
        view.points.append(CallPoint(key=point.call, model=_is_model_call(point.call),
                                     replayable=replayable, badge=text, url=url,
                                     why_not=blocked, source=source))
        if not replayable and not blocked:
            blocked = (f"{point.call} is inspect-only and cannot answer the prefix: fork at "
                       "or before it")
    return view


def workflow_links(run: Run) -> dict[str, str] | None:
    """For a mapped imported run: each imported call key → the workflow call key a fork
    before it starts at (only calls a fork can start before); None for a run not mapped."""
    if imported_forks.mapped(run) is None:
        return None
    view = imported_forks_of(run, forkable=True)
    assert view is not None
    return {p.source: p.key for p in view.forkable if p.source}


def _one_call_points(run: Run, *, forkable: bool) -> ImportedForks:
    """Every model call of unmapped imported run ``run``, read from its rows' columns and
    its ``trace.imported`` (no message payload decoded: the page renders this each time)."""
    view = ImportedForks(mode="one_call")
    infos = imported_calls(run.id)
    rows = (Event.objects.filter(run_id=run.id, type__in=("node.started", "agent.requested"))
            .order_by("seq").values_list("seq", "type", "node", "occurrence", "payload__call"))
    starts: dict[tuple[str | None, int | None], int] = {}
    for seq, type_, node, occurrence, part in rows:
        if type_ == "node.started":
            starts[(node, occurrence)] = seq - 1
            continue
        key = f"{node}#{occurrence}/{part or 'turn:1'}"
        replayable, text = _status(infos.by_key.get(key) if infos else None)
        point = starts.get((node, occurrence))
        url = compose_url(run, key, point) if forkable and replayable else ""
        view.points.append(CallPoint(key=key, model=True, replayable=replayable, badge=text,
                                     url=url, why_not="" if replayable else text))
    return view


@dataclass
class CallComposer:
    """The composer before call ``key`` of imported run ``run``: its recorded request is
    what the fields start from; a field left as it was is no change."""

    run: Run
    key: str
    mode: Mode
    seq: int | None  # the run's boundary before the call's node (one-call), for "Cancel"
    asked: AgentRequested | None  # None: a point before a tool call (mapped)
    replayable: bool
    badge: str
    offered_tools: list[str] = field(default_factory=list)
    trace_tools: list[str] = field(default_factory=list)  # every tool the trace offered
    models: list[str] = field(default_factory=list)
    providers: list[str] = field(default_factory=list)
    workflow: str = ""

    is_call = True  # the template's switch between this and the node composer

    @property
    def messages(self) -> str:
        return pretty(self.asked.messages) if self.asked is not None else ""

    def field_names(self) -> list[str]:
        """Every field with an error slot (refreshed on each preflight)."""
        names = ["form", "at", "extra_changes", "max_live_calls", "max_cost_usd", "label"]
        if self.asked is not None:
            names += ["call-model", "call-provider", "call-prompt", "call-temperature",
                      "call-messages"]
        names.append("call-tools" if self.mode == "one_call" else "input_patch")
        return names

    def folded_errors(self, errors: dict[str, str]) -> dict[str, bool]:
        return {}

    def initial(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "at_call": self.key, "extra_changes": "", "memoize": False,
            "max_live_calls": DEFAULT_MAX_LIVE_CALLS,
            "max_cost_usd": f"{DEFAULT_MAX_COST_USD:.2f}", "ignore_budget": False,
            "label": "", "client_request_id": uuid.uuid4().hex, "call-provider": "",
            "input_patch": "",
            "call-tools": list(self.offered_tools)}
        if self.asked is not None:
            values.update({"call-model": self.asked.model,
                           "call-prompt": self.asked.system_prompt,
                           "call-temperature": self.asked.temperature,
                           "call-messages": self.messages})
        return values

    def posted(self, data: Any) -> dict[str, Any]:
        """The submitted values, to show the form again as it was sent."""
        values = self.initial()
        for name in values:
            if name in data and name != "call-tools":
                values[name] = data[name]
        values["call-tools"] = data.getlist("call-tools") if "call-tools-shown" in data \
            else values["call-tools"]
        for name in ("memoize", "ignore_budget"):
            values[name] = data.get(name) == "on"
        return values

    def provider_for(self, model: str, chosen: str) -> str | None:
        """The provider a model change names: the one chosen; else ``scripted`` for a
        ``scripted-*`` model of a call that was not (the scripted provider serves them);
        else none (the call's own)."""
        if chosen:
            return chosen
        if self.asked is not None and model.startswith(SCRIPTED_PREFIX) \
                and self.asked.provider != "scripted":
            return "scripted"
        return None


def call_composer(run: Run, key: str, *, seq: int | None, models: list[str],
                  providers: list[str]) -> CallComposer:
    """The composer before ``key`` of imported run ``run``. A key the fork cannot start
    before is refused when the fork is asked (the engine's rule, said once)."""
    found = imported_forks.mapped(run)
    mode: Mode = "workflow" if found is not None else "one_call"
    events = events_of(run, mode)
    asked = next((e for e in events if isinstance(e, AgentRequested) and call_key(e) == key),
                 None)
    replayable, text = _status(_infos(events).get(key))
    trace_tools: list[str] = []
    for event in events:
        if isinstance(event, AgentRequested):
            trace_tools += [str(t["name"]) for t in event.tools or ()
                            if str(t["name"]) not in trace_tools]
    offered = [str(t["name"]) for t in (asked.tools or ())] if asked is not None else []
    known = sorted(set(models) | ({asked.model} if asked is not None else set()))
    return CallComposer(run=run, key=key, mode=mode, seq=seq, asked=asked,
                        replayable=replayable, badge=text, offered_tools=offered,
                        trace_tools=trace_tools, models=known, providers=providers,
                        workflow=found[1] if found else "")


def messages_changed(composer: CallComposer, messages: Any) -> bool:
    asked = composer.asked
    return asked is not None and json.dumps(messages, sort_keys=True) != json.dumps(
        asked.messages, sort_keys=True)


__all__ = ["CallComposer", "CallPoint", "ImportedForks", "call_composer", "compose_url",
           "imported_forks_of", "workflow_links"]
