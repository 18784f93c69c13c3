"""Imported runs in a store, ready to fork (SPEC §8 (a)): the tests' one helper."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.events import RunStarted
from forklab.engine.providers import ProviderRegistry, ScriptedProvider
from forklab.engine.store import MemoryStore, Store
from forklab.engine.traces import SpanRecord, map_trace


def imported(spans: Sequence[SpanRecord], *, run_id: str = "imported",
             store: Store | None = None) -> Store:
    """The trace of ``spans`` mapped and stored as run ``run_id`` (as the receiver stores
    it: its synthetic graph saved, the run started under that version)."""
    store = store or MemoryStore()
    run = map_trace(spans, run_id=run_id)
    version = store.save_graph(run.graph)
    first = run.events[0]
    assert isinstance(first, RunStarted)
    store.append(run_id, [dataclasses.replace(first, graph_version=version), *run.events[1:]],
                 expected_seq=0)
    return store


def offline_env() -> Environment:
    """forklab's providers as a fork of an imported run finds them, all answering offline:
    ``openai`` (the traces' provider) and ``scripted`` are the deterministic scripted model."""
    model = ScriptedProvider()
    return Environment(clock=FixedClock(), ids=counter_ids("fork"),
                       providers=ProviderRegistry({"openai": model, "scripted": model}))
