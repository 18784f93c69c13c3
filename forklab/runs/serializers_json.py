"""Plain-dict JSON forms of the models (SPEC §4.6); shared by the CLI, API and web.

Plain functions rather than DRF serializers so management commands and templates can use
them without the REST machinery.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from forklab.runs.models import Event, Run


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def usd(value: Decimal | float | None) -> float | None:
    return None if value is None else round(float(value), 8)


def run_to_json(run: Run) -> dict[str, Any]:
    """The Run shape: id, graph, graph_version, run_kind, status, label, lineage, input,
    memory, path, cost {input_tokens, output_tokens, usd}, times and error."""
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
    """The Event shape: seq, type, node, occurrence, iteration, payload, at."""
    return {
        "seq": event.seq,
        "type": event.type,
        "node": event.node,
        "occurrence": event.occurrence,
        "iteration": event.iteration,
        "payload": event.payload,
        "at": iso(event.at),
    }
