"""Plain-dict JSON forms of the models (SPEC §4.6); shared by the CLI, API and web.

Plain functions rather than DRF serializers so management commands and templates can use
them without the REST machinery.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from forklab.engine.events import TraceImported
from forklab.engine.traces.replayable import ImportedCalls, calls_json
from forklab.runs import store
from forklab.runs.models import Event, Run


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def usd(value: Decimal | float | None) -> float | None:
    return None if value is None else round(float(value), 8)


UNREADABLE = {"code": "unreadable",
              "message": "this run was stored by an older version with a value that cannot be "
                         "shown (a string that is not valid Unicode); a project admin can "
                         "delete it"}
_RUN_JSON_FIELDS = ("input", "memory", "path", "error", "fork_mutations", "imported")


def readable(value: Any) -> bool:
    """True when ``value`` can be sent as UTF-8 JSON (rows stored by older versions may hold
    lone surrogates, which no response can encode). One C-speed serialization."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError, TypeError, RecursionError):
        return False
    return True


def run_to_json(run: Run, *, imported: dict[str, Any] | bool | None = True) -> dict[str, Any]:
    """The Run shape: id, graph, graph_version, run_kind, status, label, lineage, input,
    memory, path, cost {input_tokens, output_tokens, usd}, times and error; and
    ``imported`` (null for a run not imported from a trace): the trace, its span count and
    each call with whether it is replayable (:func:`imported_of`). ``imported``: the
    run's ``trace.imported`` payload when the caller read it already (:func:`runs_to_json`
    reads a page's in one query), True to read it here.

    A row whose stored JSON cannot be sent (an older version kept a lone surrogate) comes
    out *unreadable*: those fields empty and ``error.code`` ``unreadable`` — so one such row
    never breaks a list, a page or ``runs --json`` for everybody else.
    """
    body = _run_fields(run)
    if imported is True:
        imported = imported_payloads([run]).get(run.id)
    body["imported"] = imported_of(imported) if isinstance(imported, dict) else None
    if not all(readable(body[name]) for name in _RUN_JSON_FIELDS):
        body.update(input={}, memory={}, path=[], fork_mutations=[], imported=None,
                    error=dict(UNREADABLE))
    return body


def runs_to_json(runs: Iterable[Run]) -> list[dict[str, Any]]:
    """:func:`run_to_json` of each run, the imported ones' ``trace.imported`` read in one
    query."""
    rows = list(runs)
    payloads = imported_payloads(rows)
    return [run_to_json(r, imported=payloads.get(r.id)) for r in rows]


def imported_payloads(runs: Iterable[Run]) -> dict[str, dict[str, Any]]:
    """The ``trace.imported`` payload of each run imported from a trace, by run id."""
    ids = [r.id for r in runs if r.trace_id]
    if not ids:
        return {}
    rows = Event.objects.filter(run_id__in=ids, seq=2, type=TraceImported.TYPE
                                ).values_list("run_id", "payload")
    return {run_id: payload for run_id, payload in rows if isinstance(payload, dict)}


def imported_calls(run_id: str) -> ImportedCalls | None:
    """The calls of ``run_id`` by call key with whether each is replayable, when the run
    was imported from a trace (None otherwise): what the step drawer and the conversation
    put beside each call."""
    payload = Event.objects.filter(run_id=run_id, seq=2, type=TraceImported.TYPE
                                   ).values_list("payload", flat=True).first()
    return ImportedCalls.from_payload(payload) if isinstance(payload, dict) else None


def imported_of(payload: dict[str, Any]) -> dict[str, Any]:
    """The Run JSON's ``imported``: ``{trace_id, spans, conversation, rejected_spans,
    calls}``, each call ``{call, kind, tool?, span_id, replayable, missing?,
    capture_hint?}`` (``missing`` and ``capture_hint`` when it is inspect-only)."""
    return {"trace_id": payload.get("trace_id"), "spans": payload.get("spans"),
            "conversation": payload.get("conversation"),
            "rejected_spans": len(payload.get("rejected") or ()),
            "calls": calls_json(payload)}


def _run_fields(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "project": run.project.slug,
        "graph": run.graph_slug,
        "graph_version": run.graph_version_number,
        "run_kind": run.run_kind,
        "status": run.status,
        "label": run.label,
        "parent_run_id": run.parent_run_id,
        "fork_sequence_id": run.fork_sequence_id,
        "fork_node_id": run.fork_node_id,
        "fork_mutations": run.fork_mutations,
        "fork_group_id": run.fork_group_id,
        "replay_version": run.replay_version,
        "input": run.input,
        "memory": run.memory,
        "path": run.path,
        "cost": {
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "usd": usd(run.cost_usd),
        },
        "created_at": iso(run.created_at),
        "finished_at": iso(run.finished_at),
        "error": run.error,
    }


def event_to_json(event: Event) -> dict[str, Any]:
    """The Event shape: seq, type, node, occurrence, iteration, payload, at (an unreadable
    payload — see ``run_to_json`` — reads ``{"unreadable": true}``)."""
    return {
        "seq": event.seq,
        "type": event.type,
        "node": event.node,
        "occurrence": event.occurrence,
        "iteration": event.iteration,
        "payload": readable_payload(store.restored_payload(event.run_id, event.type,
                                                         event.payload)),
        "at": iso(event.at),
    }


def readable_payload(payload: Any) -> Any:
    return payload if readable(payload) else {"unreadable": True,
                                              "message": UNREADABLE["message"]}
