"""One read model of runs and forks: what the REST API and the dashboard show of a run.

A :class:`RunView` is one run as every reader sees it: the Run shape (its row), and for a
fork the fork fields (state, base, changes) with its stored result
(:class:`~forklab.runs.projections.ForkResultProjection`: estimate, calls, diff, explain,
point …). ``GET /api/v1/runs/{id}/``, ``GET /api/v1/forks/{id}/``, the dashboard's run page
and its fork diff page all read :func:`view`.

A finished run is immutable (its log is complete, its projections are written), so its view
is computed once and kept per process (LRU), keyed by what can still change on its row —
its last seq and status first: a run that changes status, or gains events, is a different
key and is read afresh. A run that is not finished is read on every call and never kept.
Adapters may keep what they render of a view with it (:meth:`RunView.rendered`: the API's
JSON response bytes), so a warm read of a finished fork is one query for its row, whose access
check the caller makes anyway. Treat what a view holds as read-only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import Field as DbField
from pydantic import Field

from forklab.engine.errors import ForklabError
from forklab.engine.fork.changes import Change, parse_changes
from forklab.engine.fork.wire import ForkPointWire, OutModel, StoredForkResult
from forklab.engine.status import ForkState
from forklab.runs.models import Run, RunKind, RunStatus
from forklab.runs.projections import ForkResultProjection
from forklab.runs.readcache import VIEWS as _VIEWS
from forklab.runs.readcache import forked_point
from forklab.runs.serializers_json import run_to_json


class ForkView(OutModel):
    """A fork's own fields around its Run shape (SPEC §4.3): its state in the fork
    vocabulary, its base, its combined changes and — once it finished — its stored result
    (``problem`` says why a finished fork's result cannot be rebuilt)."""

    state: ForkState
    not_run_reason: str | None
    cancel_requested: bool
    queue_position: int | None
    base_run_id: str | None
    changes: list[Change]
    result: StoredForkResult | None = None
    problem: str | None = Field(default=None, exclude=True)


@dataclass
class RunView:
    """One run as every reader shows it (see the module docstring); read-only."""

    run_json: dict[str, Any]
    fork: ForkView | None
    cached: bool
    # an adapter's response bytes by body name (the API's ``api.run``, ``api.fork``): bytes,
    # so what is kept is immutable whoever reads it
    _bodies: dict[str, bytes] = field(default_factory=dict)

    def rendered(self, name: str, build: Callable[[], bytes]) -> bytes:
        """A body an adapter renders of this view (``build()``), kept with a cached view so
        a finished run is rendered once per process; built afresh for a run still going."""
        body = self._bodies.get(name)
        if body is None:
            body = build()
            if self.cached:
                self._bodies[name] = body
        return body


def _key(run: Run) -> tuple[Any, ...]:
    # what may still change on a finished run's row: a status (a run re-opened by an answer,
    # a failure recorded), new events, a label, its base deleted, a cancel request
    return (run.pk, run.last_seq, run.status, run.label, run.parent_run_id,
            run.cancel_requested, run.project.slug)


def view(run: Run) -> RunView:
    """The run's view: cached when the run is finished, computed afresh otherwise."""
    if not run.finished:
        return _build(run, cached=False)
    key = _key(run)
    found: RunView | None = _VIEWS.get(key)
    if found is None:
        found = _build(run, cached=True)
        if found.fork is None or found.fork.problem is None:  # a problem may be passing
            _VIEWS.put(key, found)
    return found


def fork_result(run: Run) -> StoredForkResult | None:
    """A finished fork's stored result, as the API serves it (None: not a finished fork,
    or its result cannot be rebuilt)."""
    fork = view(run).fork if ForkResultProjection.applies_to(run) else None
    return None if fork is None else fork.result


def forked(run: Run) -> ForkPointWire | None:
    """Where a fork forked (the headers' "at seq N (before …)"): a finished fork's point
    from its view, else its ``run.forked`` event's; None for a run that is not a fork."""
    if not run.parent_run_id:
        return None
    result = fork_result(run)
    if result is not None and result.point is not None:
        return result.point
    return forked_point(run.id)


def forget() -> None:
    """Drop every cached view (benchmarks measure cold reads; tests rewriting rows;
    ``readcache.clear_caches`` drops them too)."""
    _VIEWS.clear()


def _build(run: Run, *, cached: bool) -> RunView:
    run_json = run_to_json(run)
    fork = _fork_view(run, run_json) if run.run_kind == RunKind.COUNTERFACTUAL else None
    return RunView(run_json=run_json, fork=fork, cached=cached)


def fork_state(run: Run) -> tuple[ForkState, str | None]:
    """``(state, not_run_reason)``: the run status in the fork vocabulary of SPEC §4.3.

    ``completed`` reads ``complete``; a fork that failed before writing any event (its
    request no longer fitted the base when the task ran) is ``not_run`` with the error code.
    """
    error = run.error or {}
    if run.status == RunStatus.FAILED and error.get("not_run"):
        return ForkState.NOT_RUN, str(error.get("code") or "not_run")
    if run.status == RunStatus.COMPLETED:
        return ForkState.COMPLETE, None
    return ForkState(run.status), None


def _fork_view(run: Run, run_json: dict[str, Any]) -> ForkView:
    from forklab.runs.store import DjangoStore

    state, reason = fork_state(run)
    result, problem = None, None
    if ForkResultProjection.applies_to(run):
        try:  # one stored row (runs.projections): neither run's log is read
            result = ForkResultProjection.read(run, DjangoStore(run.project))
        except ForklabError as exc:  # e.g. its base run was deleted before it was stored
            problem = f"the result cannot be rebuilt: {exc.code}: {exc.message}"
    return ForkView(state=state, not_run_reason=reason, cancel_requested=run.cancel_requested,
                    queue_position=queue_position(run), base_run_id=run.parent_run_id,
                    changes=parse_changes(run_json["fork_mutations"]), result=result,
                    problem=problem)


def queue_position(run: Run) -> int | None:
    """Where a queued run waits: 1 + the queued work nobody has taken yet that was queued
    before it (the deployment's one queue, all projects). None once it is not queued."""
    if run.status != RunStatus.QUEUED:
        return None
    if run.lease_owner:
        return 0 if run.last_seq == 0 else None  # taken: starting now
    return 1 + _untaken_before(run)


def _untaken_before(run: Run) -> int:
    """How many queued runs nobody has taken were created before ``run``.

    Every accepted fork answers this, so it is one plain SQL statement: building the same
    ``COUNT`` through the ORM (``Run.objects.filter(...).count()``) cost about five times
    the CPU of running it — ~1.5 ms of a ~10 ms accept. Column names come from the model.
    """
    meta, quote = Run._meta, connection.ops.quote_name
    column = {name: quote(f.column) for name in ("status", "lease_owner", "created_at")
              if isinstance(f := meta.get_field(name), DbField) and f.column}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM {quote(meta.db_table)} WHERE {column['status']} = %s "
            f"AND {column['lease_owner']} = %s AND {column['created_at']} < %s",
            [RunStatus.QUEUED.value, "",
             connection.ops.adapt_datetimefield_value(run.created_at)])
        (count,) = cursor.fetchone()
    return int(count)
