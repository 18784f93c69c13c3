"""Plain-dict JSON forms of the models (SPEC §4.6); shared by the CLI, API and web.

Plain functions rather than DRF serializers so management commands and templates can use
them without the REST machinery.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Any

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
_RUN_JSON_FIELDS = ("input", "memory", "path", "error", "fork_mutations")


def readable(value: Any) -> bool:
    """True when ``value`` can be sent as UTF-8 JSON (rows stored by older versions may hold
    lone surrogates, which no response can encode). One C-speed serialization."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError, TypeError, RecursionError):
        return False
    return True


def run_to_json(run: Run) -> dict[str, Any]:
    """The Run shape: id, graph, graph_version, run_kind, status, label, lineage, input,
    memory, path, cost {input_tokens, output_tokens, usd}, times and error.

    A row whose stored JSON cannot be sent (an older version kept a lone surrogate) comes
    out *unreadable*: those fields empty and ``error.code`` ``unreadable`` — so one such row
    never breaks a list, a page or ``runs --json`` for everybody else.
    """
    body = _run_fields(run)
    if not all(readable(body[name]) for name in _RUN_JSON_FIELDS):
        body.update(input={}, memory={}, path=[], fork_mutations=[], error=dict(UNREADABLE))
    return body


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
