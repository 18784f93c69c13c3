"""Read-only queries. Views, the API and commands read through these, never write."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Max, QuerySet

from forklab.engine.graph import ApprovalNode, GraphSpec
from forklab.engine.reused_form import expand
from forklab.runs import store
from forklab.runs.access import User
from forklab.runs.errors import InvalidArgument, NotFound
from forklab.runs.models import Case, Event, Graph, Project, Run, RunKind, RunStatus

# the cached reads, read through queries (re-exported)
from forklab.runs.readcache import Comparison as Comparison
from forklab.runs.readcache import clear_caches as clear_caches
from forklab.runs.readcache import compare_explain as compare_explain
from forklab.runs.readcache import compare_runs as compare_runs
from forklab.runs.readcache import forked_point as forked_point
from forklab.runs.readcache import run_events as run_events
from forklab.runs.readcache import state_at as state_at
from forklab.runs.readmodel import fork_result as fork_result
from forklab.runs.readmodel import forked as forked


def _check_choice(name: str, value: str | None, choices: list[str]) -> None:
    if value is not None and value not in choices:
        raise InvalidArgument(
            f"unknown {name} {value!r}; expected one of: {', '.join(choices)}",
            **{name: value},
        )


def visible_projects(user: User) -> QuerySet[Project]:
    """Projects ``user`` can read: all for superusers, their memberships otherwise."""
    if not user.is_authenticated:
        return Project.objects.none()
    if getattr(user, "is_superuser", False):
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user)


def list_runs(
    *,
    projects: QuerySet[Project] | None = None,
    project: str | None = None,
    kind: str | None = None,
    status: str | None = None,
    graph: str | None = None,
    parent: str | None = None,
    trace_id: str | None = None,
    conversation: str | None = None,
) -> QuerySet[Run]:
    """Runs newest first, filtered; ``projects`` limits to readable projects (None: all)."""
    _check_choice("kind", kind, list(RunKind.values()))
    _check_choice("status", status, list(RunStatus.values()))
    runs = Run.objects.select_related("project")
    filters: dict[str, Any] = {
        "project__slug": project, "run_kind": kind, "status": status,
        "graph_slug": graph, "parent_run_id": parent,
        "trace_id": trace_id.lower() if trace_id else None, "conversation_id": conversation,
    }
    runs = runs.filter(**{k: v for k, v in filters.items() if v is not None})
    if projects is not None:
        runs = runs.filter(project__in=projects)
    return runs.order_by("-created_at", "id")


def runs_for_user(user: User, **filters: Any) -> QuerySet[Run]:
    return list_runs(projects=visible_projects(user), **filters)


def get_run(run_id: str, *, user: User | None = None) -> Run:
    """One run; outside the user's projects it does not exist (not_found, never forbidden)."""
    runs = Run.objects.select_related("project")
    if user is not None:
        runs = runs.filter(project__in=visible_projects(user))
    run = runs.filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"no run {run_id!r}", run_id=run_id)
    return run


def get_project(slug: str) -> Project:
    project = Project.objects.filter(slug=slug).first()
    if project is None:
        known = ", ".join(Project.objects.values_list("slug", flat=True)) or "none"
        raise NotFound(f"no project {slug!r}; projects: {known}", project=slug)
    return project


# -- the dashboard's reads ---------------------------------------------------------------------
# Runs can hold tens of thousands of events: these page in SQL and select only the columns a
# page shows. A finished run's log never changes, so its events are cached per process (LRU).

# ``node.reused`` (a served node, docs/forking.md#served-nodes-one-nodereused-event) is a
# start and an end at once and carries its calls: readers expand it with
# ``forklab.engine.reused_form``
NODE_LIFECYCLE = ("node.started", "node.completed", "node.failed", "node.interrupted",
                  "node.reused")
ACTION_RESULTS = ("agent.responded", "tool.returned", "human.answered", "route.decided",
                  "subgraph.completed", "effect.suppressed", "node.completed", "node.failed",
                  "node.reused")


def search_runs(user: User, *, q: str = "",
                **filters: Any) -> QuerySet[Run]:
    """``runs_for_user`` plus a label/id search and each run's number of direct forks."""
    from django.db.models import Count, Q

    runs = runs_for_user(user, **{k: v for k, v in filters.items() if v})
    if q:
        runs = runs.filter(Q(label__icontains=q) | Q(id__startswith=q))
    return runs.annotate(fork_count=Count("children"))


def graph_slugs(user: User) -> list[str]:
    return list(Run.objects.filter(project__in=visible_projects(user))
                .order_by("graph_slug").values_list("graph_slug", flat=True).distinct())


def lineage(run: Run, *, limit: int = 50) -> list[Run]:
    """The run's ancestors, the base run first and ``run`` last (same project only)."""
    chain = [run]
    seen = {run.id}
    while chain[0].parent_run_id and len(chain) < limit:
        parent = Run.objects.filter(pk=chain[0].parent_run_id, project=run.project).first()
        if parent is None or parent.id in seen:
            break
        seen.add(parent.id)
        chain.insert(0, parent)
    return chain


def fork_tree(root: Run, *, limit: int = 200) -> list[tuple[Run, int]]:
    """``root`` and its forks, forks of forks …, depth-first with their depth."""
    children: dict[str | None, list[Run]] = {}
    frontier, found = [root.id], 0
    while frontier and found < limit:
        level = list(Run.objects.filter(parent_run_id__in=frontier, project=root.project)
                     .order_by("created_at", "id")[:limit - found])
        for child in level:
            children.setdefault(child.parent_run_id, []).append(child)
        found += len(level)
        frontier = [child.id for child in level]
    out: list[tuple[Run, int]] = []

    def walk(run: Run, depth: int) -> None:
        out.append((run, depth))
        for child in children.get(run.id, []):
            walk(child, depth + 1)

    walk(root, 0)
    return out


def node_lifecycle(run_id: str) -> list[tuple[int, str, str, int, int, float]]:
    """``(seq, type, node, occurrence, iteration, timestamp)`` of every node start and end."""
    rows = (Event.objects.filter(run_id=run_id, type__in=NODE_LIFECYCLE).order_by("seq")
            .values_list("seq", "type", "node", "occurrence", "iteration", "timestamp"))
    # node events always carry node, occurrence and iteration (the columns are nullable for
    # run-level events)
    return [(seq, type_, node or "", occurrence or 0, iteration or 0, ts)
            for seq, type_, node, occurrence, iteration, ts in rows]


def action_results(run_id: str, first: int, last: int) -> list[tuple[int, str, str, dict[str, Any]]]:
    """``(seq, type, node, payload)`` of calls and node ends with ``first <= seq <= last``."""
    return _actions(Event.objects.filter(run_id=run_id, type__in=ACTION_RESULTS,
                                         seq__gte=first, seq__lte=last))


LABELLED = ("agent.responded", "tool.returned", "human.answered", "route.decided",
            "subgraph.completed", "node.completed", "effect.suppressed", "node.reused")


def label_rows(run_id: str) -> list[tuple[int, str, Any, Any]]:
    """``(seq, type, label, memo)`` of every labelled event: the JSON fields are extracted in
    SQL as text, so a 10,000-event run decodes no payload at all. ``memo`` is True/False."""
    from django.db.models.fields.json import KT

    rows = (Event.objects.filter(run_id=run_id, type__in=LABELLED).order_by("seq")
            .values_list("seq", "type", KT("payload__label"), KT("payload__memo")))
    # a served node (``node.reused``) is a memo hit whose calls are all ``reused``
    return [(seq, type_, "reused", True) if type_ == "node.reused" else
            (seq, type_, label, memo in (1, "1", True, "true")) for seq, type_, label, memo
            in rows]


def matching_seqs(run_id: str, text: str, *, limit: int = 20_000) -> list[int]:
    """Seqs of the run's events whose payload holds ``text`` (case-insensitive; JSON escapes
    of non-ASCII text are matched too, as SQLite stores them)."""
    import json

    from django.db.models import Q

    escaped = json.dumps(text)[1:-1]
    match = Q(payload__icontains=text) | (Q(payload__icontains=escaped) if escaped != text
                                          else Q())
    return list(Event.objects.filter(match, run_id=run_id).order_by("seq")
                .values_list("seq", flat=True)[:limit])


def action_results_in(run_id: str, ranges: list[tuple[int, int]]
                      ) -> list[tuple[int, str, str, dict[str, Any]]]:
    """``action_results`` for several seq ranges at once (the executions a filtered timeline
    page shows, scattered over the log)."""
    from django.db.models import Q

    if not ranges:
        return []
    within = Q()
    for first, last in ranges:
        within |= Q(seq__gte=first, seq__lte=last)
    return _actions(Event.objects.filter(within, run_id=run_id, type__in=ACTION_RESULTS))


def _actions(events: QuerySet[Event]) -> list[tuple[int, str, str, dict[str, Any]]]:
    # calls and node ends always name their node; a served node reads as its calls and end
    rows: list[tuple[int, str, str, dict[str, Any]]] = []
    for seq, type_, node, payload in events.order_by("seq").values_list("seq", "type", "node",
                                                                         "payload"):
        if type_ == "node.reused":
            rows.extend((seq, e["type"], node or "", e["payload"]) for e in expand(
                {"type": type_, "seq": seq, "node": node, "payload": payload})
                if e["type"] in ACTION_RESULTS)
        else:
            rows.append((seq, type_, node or "", payload))
    return rows


def execution_outputs(run_id: str, first: int, last: int) -> tuple[dict[str, Any], list[Any]]:
    """What one node execution (its events ``first..last``) wrote to memory, as its
    ``writes`` are folded (a deleted key is absent), and the results its tool calls returned."""
    writes: dict[str, Any] = {}
    results: list[Any] = []
    rows = (Event.objects.filter(run_id=run_id, seq__gte=first, seq__lte=last,
                                 type__in=("memory.written", "tool.returned", "node.reused"))
            .order_by("seq").values_list("type", "payload"))
    for type_, payload in [(e["type"], e["payload"]) for t, p in rows
                           for e in expand({"type": t, "payload": p})]:
        if type_ not in ("memory.written", "tool.returned"):
            continue
        if type_ == "tool.returned":
            results.append(payload.get("result"))
        elif payload.get("deleted"):
            writes.pop(payload.get("key"), None)
        else:
            writes[payload.get("key")] = payload.get("value")
    return writes, results


def event_types(run_id: str) -> list[str]:
    return list(Event.objects.filter(run_id=run_id).order_by("type")
                .values_list("type", flat=True).distinct())


def event_page(run_id: str, *, type: str | None = None, offset: int = 0,
               limit: int = 50) -> tuple[list[Event], int]:
    """One page of a run's events in seq order (optionally of one type), and how many match
    in all. Paged in SQL: a 10,000-event run reads ``limit`` rows."""
    events = Event.objects.filter(run_id=run_id)
    if type:
        events = events.filter(type=type)
    return list(events.order_by("seq")[offset:offset + limit]), events.count()


def events_before(run_id: str, seq: int, *, type: str | None = None) -> int:
    """How many events (of ``type``) come before ``seq``: the offset of its page."""
    events = Event.objects.filter(run_id=run_id, seq__lt=seq)
    return (events.filter(type=type) if type else events).count()


@dataclass(frozen=True, slots=True)
class ForkPrefix:
    """The memory and input a fork started from, before its changes."""

    memory: dict[str, Any]
    input: dict[str, Any]


def fork_prefix(run_id: str) -> ForkPrefix:
    """The fork's :class:`ForkPrefix` (its ``run.forked`` prefix state, read without the rest
    of that state)."""
    from django.db.models import F

    row = (Event.objects.filter(run_id=run_id, type="run.forked")
           .values_list(F("payload__prefix_state__memory"),
                        F("payload__prefix_state__input")).first())
    if row is None:
        return ForkPrefix(memory={}, input={})
    memory, input_ = row
    if memory is None and input_ is None:  # by reference to its base's log (forked_rows)
        prefix = (store.forked_payload(run_id) or {}).get("prefix_state") or {}
        memory, input_ = prefix.get("memory"), prefix.get("input")
    return ForkPrefix(memory=memory or {}, input=input_ or {})


def graph_of(run: Run) -> GraphSpec:
    """The GraphSpec the run executed: a fork's effective graph, else its stored version."""
    from django.db.models import F

    from forklab.engine.graph import parse_graph

    if run.run_kind == RunKind.COUNTERFACTUAL:
        spec = (Event.objects.filter(run_id=run.id, type="run.forked")
                .values_list(F("payload__graph"), flat=True).first())
        if spec is None:  # stored as a delta against its graph version (forked_rows)
            spec = (store.forked_payload(run.id) or {}).get("graph")
        if spec:
            return parse_graph(spec)
    if run.graph_version is None:
        raise NotFound(f"run {run.id!r} has no stored graph version", run_id=run.id)
    return parse_graph(run.graph_version.spec)


def waiting_gate(run: Run) -> ApprovalNode | None:
    """The approval node (of the graph the run executes) that paused ``run`` waits at: the
    node of its last event, ``human.requested`` (None: it waits at no gate)."""
    node = (Event.objects.filter(run_id=run.id, seq=run.last_seq, type="human.requested")
            .values_list("node", flat=True).first())
    if node is None:
        return None
    graph = graph_of(run)
    gate = graph.node(node) if graph.has_node(node) else None
    return gate if isinstance(gate, ApprovalNode) else None


# -- the API's reads ---------------------------------------------------------------------------


def list_events(run: Run, *, type: str | None = None, after: int = 0,
                limit: int = 500) -> list[dict[str, Any]]:
    """Up to ``limit`` Event shapes of ``run`` with seq > ``after``, by seq.

    One indexed range scan on ``(run, seq)`` (the unique constraint), however long the log.
    """
    rows = Event.objects.filter(run_id=run.pk, seq__gt=after)
    if type is not None:
        rows = rows.filter(type=type)
    return [{"seq": seq, "type": type_, "node": node, "occurrence": occurrence,
             "iteration": iteration, "payload": store.restored_payload(run.pk, type_, payload),
             "at": at.isoformat()}
            for seq, type_, node, occurrence, iteration, payload, at in
            rows.order_by("seq").values_list(*_EVENT_SHAPE)[:limit]]


_EVENT_SHAPE = ("seq", "type", "node", "occurrence", "iteration", "payload", "at")


def list_graphs(user: User, *, project: str | None = None,
                graph_id: str | None = None) -> QuerySet[Graph]:
    graphs = (Graph.objects.filter(project__in=visible_projects(user))
              .select_related("project").annotate(latest_version=Max("versions__version")))
    if project is not None:
        graphs = graphs.filter(project__slug=project)
    if graph_id is not None:
        graphs = graphs.filter(graph_id=graph_id)
    return graphs.order_by("project__slug", "graph_id")


def get_graph(user: User, key: str, *,
              project: str | None = None) -> Graph:
    """A readable graph by numeric id, or by graph id (``project`` disambiguates)."""
    graphs = list_graphs(user, project=project)
    numeric = key.isascii() and key.isdigit()  # not '²': str.isdigit takes any digit
    found = graphs.filter(pk=int(key)).first() if numeric else None
    if found is None:
        matches = list(graphs.filter(graph_id=key)[:2])
        if len(matches) > 1:
            raise InvalidArgument(
                f"graph {key!r} exists in several of your projects; add ?project=",
                graph=key)
        found = matches[0] if matches else None
    if found is None:
        raise NotFound(f"no graph {key!r} among your projects", graph=key)
    return found


def forks_of(run: Run) -> QuerySet[Run]:
    """Counterfactual runs forked from ``run``, newest first."""
    return list_runs(parent=run.pk, kind=RunKind.COUNTERFACTUAL)


def list_cases(user: User, *,
               project: str | None = None) -> QuerySet[Case]:
    cases = Case.objects.filter(project__in=visible_projects(user)).select_related(
        "project", "graph_version__graph")
    if project is not None:
        cases = cases.filter(project__slug=project)
    return cases.order_by("project__slug", "name")


def one_call(run: Run) -> str | None:
    """The call a one-call fork of an imported run re-asked (its ``run.forked`` says it,
    SPEC §8 (a)); None for any other run."""
    if run.run_kind != RunKind.COUNTERFACTUAL or not run.last_seq:
        return None
    found = (Event.objects.filter(run=run, type="run.forked")
             .values_list("payload__one_call", flat=True).first())
    return None if found is None else str(found)
