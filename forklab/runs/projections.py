"""Read-side projections computed once per finished run, so reads never refold its log.

The log stays the truth; each projection is a cache with a ``version`` (the run's last seq
when it was computed) and is rebuilt when that version is not the run's last seq.

- :class:`ForkResultProjection`: a finished fork's SPEC §3 result fields (estimate, calls,
  diff, explain, warnings, …). Written by the worker once it has let go of the fork
  (``forklab.runs.tasks.after_work``, after its lease is released) and, for a fork
  finished before this projection existed, by the first read. ``GET /api/v1/forks/{id}/`` then reads the run row and this
  one row: no event of either run.
"""

from __future__ import annotations

import contextlib
import logging

from django.db import IntegrityError
from django.db.models import TextField
from django.db.models.functions import Cast
from pydantic import ValidationError

from forklab.engine.errors import ForklabError
from forklab.engine.fork.wire import StoredForkResult
from forklab.runs.models import ForkResult, Run, RunKind

log = logging.getLogger("forklab.runs.projections")


class ForkResultProjection:
    """The stored result of a finished fork (one ``ForkResult`` row per fork)."""

    @staticmethod
    def applies_to(run: Run) -> bool:
        return run.run_kind == RunKind.COUNTERFACTUAL and run.finished and run.last_seq > 0

    @classmethod
    def read(cls, run: Run) -> StoredForkResult:
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
        return cls.refresh(run)

    @classmethod
    def refresh(cls, run: Run) -> StoredForkResult:
        """Compute the result from both logs (the one costly read) and store it."""
        from forklab.engine.fork.result import load_fork_result
        from forklab.runs.engine_env import build_environment
        from forklab.runs.store import DjangoStore

        result = StoredForkResult.of(load_fork_result(
            run.id, store=DjangoStore(run.project), env=build_environment()).wire_model())
        # a concurrent reader or worker may store the same result first
        with contextlib.suppress(IntegrityError):
            ForkResult.objects.update_or_create(
                run_id=run.pk, defaults={"version": run.last_seq, "result": result.to_wire()})
        return result

    @classmethod
    def after_run(cls, run_id: str) -> None:
        """Called when a worker leaves a run: store a finished fork's result. Never raises
        (a read computes what this could not)."""
        run = Run.objects.select_related("project").filter(pk=run_id).first()
        if run is None or not cls.applies_to(run):
            return
        try:
            cls.refresh(run)
        except ForklabError as exc:
            log.warning("fork %s: result not stored: %s: %s", run_id, exc.code, exc.message)
        except Exception:
            log.exception("fork %s: result not stored", run_id)
