"""Projections: what the store and the readers keep beside the log, one small class each.

The log stays the truth. Write-side projections are applied by ``DjangoStore.append`` to
every append (an :class:`Appended`), inside its transaction, once the events are stored:

- :class:`RunRowProjection`: the run row's columns (status, memory, path, totals, lineage…);
- :class:`UsageProjection`: one ``UsageRecord`` per ``agent.responded``;
- :class:`FinalStateProjection`: a finished run's folded state (``FinalState``), written with
  the event that finished it, so no finished log is folded twice (a fork's compact, by
  reference to its base's: :mod:`forklab.runs.final_states`);
- :class:`MetricsProjection`: what the append adds to the Prometheus series, counted once
  its transaction commits.

Read-side projections are computed once per finished run, so reads never refold its log;
each is a cache with a ``version`` (the run's last seq when it was computed) and is rebuilt
when that version is not the run's last seq.

- :class:`ForkResultProjection`: a finished fork's SPEC §3 result fields (estimate, calls,
  diff, explain, warnings, …). Written by the worker once it has let go of the fork
  (``forklab.runs.tasks.after_work``, after its lease is released) and, for a fork
  finished before this projection existed, by the first read. ``GET /api/v1/forks/{id}/`` then reads the run row and this
  one row: no event of either run.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import TextField
from django.db.models.functions import Cast
from pydantic import ValidationError

from forklab.engine.actions import AgentAnswer
from forklab.engine.errors import ForklabError
from forklab.engine.events import (
    TERMINAL_TYPES,
    AgentResponded,
    Event,
    NodeReused,
    RunForked,
    RunStarted,
)
from forklab.engine.fork.diff import incurred_usd
from forklab.engine.fork.result import ForkResult as EngineForkResult
from forklab.engine.fork.wire import StoredForkResult
from forklab.engine.state import RunState
from forklab.engine.store import Store
from forklab.runs import final_states, inserts, metrics
from forklab.runs import models as m
from forklab.runs.models import ForkResult, Run, RunKind

log = logging.getLogger("forklab.runs.projections")


def _when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _dt(ts: float | None) -> datetime | None:
    return None if ts is None else _when(ts)


def _usd(value: float | None) -> Decimal | None:
    return None if value is None else Decimal(repr(round(value, 10)))


# -- write side: applied by DjangoStore.append -------------------------------------------------


@dataclass(frozen=True)
class Appended:
    """One append as the write-side projections see it: its events are stored (same
    transaction, run row locked) and ``state`` is the run folded through them."""

    run_id: str
    project_id: int
    state: RunState
    events: list[Event]
    using: str


def project_state(state: RunState) -> dict[str, Any]:
    """The run row's projected columns for a folded ``state``."""
    fork = state.fork
    return {
        "status": state.status, "last_seq": state.version, "label": state.label,
        "run_kind": state.run_kind, "replay_version": state.replay_version,
        "graph_slug": state.graph_id, "graph_version_number": state.graph_version,
        "parent_run_id": (fork.base_run_id if fork else None) or state.parent_run_id,
        "fork_sequence_id": fork.fork_sequence_id if fork else None,
        "fork_node_id": fork.fork_node_id if fork else None,
        "fork_group_id": fork.fork_group_id if fork else None,
        "input": state.input, "memory": state.memory, "path": state.path(),
        "error": state.error, "input_tokens": state.input_tokens,
        "output_tokens": state.output_tokens, "cost_usd": _usd(state.cost_usd),
        "incurred_cost_usd": _usd(incurred_usd(state)),
        "unpriced_calls": state.unpriced_calls,
        "started_at": _dt(state.started_at), "finished_at": _dt(state.finished_at),
    }


class RunRowProjection:
    """The run row's columns, rewritten from the folded state on every append (one
    ``UPDATE``); the graph version row is looked up once, when ``run.started`` arrives.

    The append that finishes a run also frees its lease, in the same ``UPDATE``: nobody
    sees a finished run still leased (waiting for its executor's ``leases.release``), and
    an executor that dies between its final event and that release leaves nothing held.
    """

    @staticmethod
    def apply(batch: Appended) -> None:
        values = project_state(batch.state)
        if batch.state.finished:
            values.update(lease_owner="", lease_expires_at=None)
        for event in batch.events:
            if isinstance(event, RunStarted):
                values["graph_version"] = (
                    m.GraphVersion.objects.using(batch.using)
                    .filter(graph__project_id=batch.project_id,
                            graph__graph_id=batch.state.graph_id,
                            version=batch.state.graph_version).first())
            elif isinstance(event, RunForked):
                values["fork_mutations"] = list(event.changes)
        m.Run.objects.using(batch.using).filter(pk=batch.run_id).update(**values)


class UsageProjection:
    """One ``UsageRecord`` per model response (``agent.responded``), for usage reports; a
    served node (``node.reused``) gets one record for its reused responses together (the
    record is keyed by seq, and its responses share the event's)."""

    COLUMNS = ("run_id", "seq", "node", "role", "model", "label", "input_tokens",
               "output_tokens", "cost_usd", "created_at")

    @classmethod
    def apply(cls, batch: Appended) -> None:
        usage = []
        for e in batch.events:
            if isinstance(e, AgentResponded):
                role = "" if e.role is None else (e.role if e.index is None
                                                  else f"{e.role}[{e.index}]")
                usage.append((batch.run_id, e.seq, e.node or "", role, e.model, e.label,
                              e.input_tokens, e.output_tokens, _usd(e.cost_usd), _when(e.at)))
            elif isinstance(e, NodeReused) and any(isinstance(a, AgentAnswer) for a in e.actions):
                usage.append(_reused_usage(batch.run_id, e))
        inserts.insert_values(m.UsageRecord, cls.COLUMNS, usage, using=batch.using)


def _reused_usage(run_id: str, event: NodeReused) -> tuple[Any, ...]:
    answers = [a for a in event.actions if isinstance(a, AgentAnswer)]
    roles = [a.role if a.index is None else f"{a.role}[{a.index}]"
             for a in answers if a.role is not None]
    costs = [a.cost_usd for a in answers]
    return (run_id, event.seq, event.node or "", ",".join(roles)[:100], answers[0].model,
            "reused", sum(a.input_tokens for a in answers),
            sum(a.output_tokens for a in answers), _usd(_total(costs)), _when(event.at))


def _total(costs: list[float | None]) -> float | None:
    """The sum of the costs, or None when one is unknown (an unpriced model)."""
    known = [c for c in costs if c is not None]
    return sum(known) if len(known) == len(costs) else None


class FinalStateProjection:
    """A finished run's folded state, stored by the append whose event finished it (read
    back by ``DjangoStore.load_final_state``: a finished log is never folded again)."""

    @staticmethod
    def apply(batch: Appended) -> None:
        if batch.state.finished and any(e.type in TERMINAL_TYPES for e in batch.events):
            final_states.write(batch.run_id, batch.state, using=batch.using)


class MetricsProjection:
    """What the append adds to the Prometheus series (``forklab.runs.metrics``): counted
    now, applied only once the transaction commits (a rolled-back append counts nothing)."""

    @staticmethod
    def apply(batch: Appended) -> None:
        counted = metrics.observations(batch.events, batch.state)
        transaction.on_commit(counted.apply, using=batch.using)


#: applied in this order by every append
WRITE_PROJECTIONS = (RunRowProjection, UsageProjection, FinalStateProjection, MetricsProjection)


# -- read side ---------------------------------------------------------------------------------


class ForkResultProjection:
    """The stored result of a finished fork (one ``ForkResult`` row per fork)."""

    @staticmethod
    def applies_to(run: Run) -> bool:
        return run.run_kind == RunKind.COUNTERFACTUAL and run.finished and run.last_seq > 0

    @classmethod
    def read(cls, run: Run, store: Store) -> StoredForkResult:
        """The fork's result fields: the stored row when current, else computed and stored.

        Raises the ForklabError that made it impossible to compute (e.g. its base run was
        deleted before the result was ever stored).
        """
        # the stored JSON as text, parsed and validated in one pass by pydantic (no
        # intermediate Python dicts from the driver's JSON decoding)
        row = (ForkResult.objects.filter(run_id=run.pk)
               .values_list("version", Cast("result", TextField())).first())
        if row is not None and row[0] == run.last_seq:
            try:
                return StoredForkResult.model_validate_json(row[1])
            except ValidationError:  # stored by an older shape: rebuilt like a stale one
                log.warning("fork %s: stored result no longer fits; recomputed", run.pk)
        return cls.refresh(run, store)

    @classmethod
    def refresh(cls, run: Run, store: Store) -> StoredForkResult:
        """Compute the result from both logs (the one costly read) and store it."""
        from forklab.engine.fork.result import load_fork_result
        from forklab.runs.engine_env import build_environment

        loaded = load_fork_result(run.id, store=store, env=build_environment())
        result = StoredForkResult.of(loaded.wire_model(), base_version=loaded.base_state.version)
        cls._store(run, result)
        return result

    @staticmethod
    def _store(run: Run, result: StoredForkResult) -> None:
        # a concurrent reader or worker may store the same result first
        with contextlib.suppress(IntegrityError):
            ForkResult.objects.update_or_create(
                run_id=run.pk, defaults={"version": run.last_seq, "result": result.to_wire()})

    @classmethod
    def hold(cls, result: EngineForkResult) -> None:
        """Keep the result of a fork this worker just finished, as the engine returned it,
        for :meth:`after_run` to store without reading either log again.

        Sound because the returned result and the one ``load_fork_result`` rebuilds from the
        logs are equal (``tests/engine/fork/test_result_rebuilt.py``); kept with the fork's
        last seq, and used only if the run still ends there. Called only on the paths whose
        ``after_work`` runs in a ``finally`` (``tasks.claim_and_drive``, ``recover_run``,
        ``execute_sweep``), which take it out again.
        """
        state = result.state
        if result.run_id is None or state is None or not state.finished:
            return
        stored = StoredForkResult.of(result.wire_model(), base_version=result.base_state.version)
        with _held_lock:
            _held[result.run_id] = (state.version, stored)

    @classmethod
    def after_run(cls, run_id: str, store_for: Callable[[m.Project], Store]) -> None:
        """Called when a worker leaves a run: store a finished fork's result (the one it
        holds, else computed from the logs). Never raises (a read computes what this could
        not)."""
        with _held_lock:
            held = _held.pop(run_id, None)
        run = Run.objects.select_related("project").filter(pk=run_id).first()
        if run is None or not cls.applies_to(run):
            return
        try:
            if held is not None and held[0] == run.last_seq:
                cls._store(run, held[1])
            else:
                cls.refresh(run, store_for(run.project))
        except ForklabError as exc:
            log.warning("fork %s: result not stored: %s: %s", run_id, exc.code, exc.message)
        except Exception:
            log.exception("fork %s: result not stored", run_id)


# fork results held between a worker's drive and its after_work: run id -> (last seq, result)
_held: dict[str, tuple[int, StoredForkResult]] = {}
_held_lock = threading.Lock()
