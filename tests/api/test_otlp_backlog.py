"""The receiver's backlog (docs/traces.md "Storage, re-sends and late spans"): a request
that is not mapped in place is answered once its spans are stored — with its exact
``partial_success`` — and its traces are mapped from the backlog after; a span stored while a
mapper works keeps its trace on the backlog; a batch is written whole or not at all; a
backlog left by a process that died is picked up by the recovery sweep."""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from forklab.engine.traces import map_trace
from forklab.engine.traces.otlp import SpanRecord
from forklab.runs import traces
from forklab.runs.models import Project, Run, TraceBacklog, TraceSpan
from forklab.runs.store import DjangoStore
from forklab.runs.task_backends import drain
from forklab.runs.traces import (
    backlog,
    import_spans,
    map_backlog,
    run_id_for,
    sweep_backlog,
    unmapped_traces,
)
from tests.api.conftest import World
from tests.traces.spans import handmade
from tests.traces.test_mapping import workflow

_traces = itertools.count(1)


def _trace() -> list[SpanRecord]:
    """The mapping tests' two-agent workflow under a trace id no other test used."""
    trace = f"{0xbac0:08x}{next(_traces):024x}"
    return [dataclasses.replace(s, trace_id=trace) for s in workflow()]


def _events(project: Project, spans: list[SpanRecord]) -> tuple[list[dict[str, Any]], ...]:
    """(the run's stored events, the events of the whole trace mapped at once)."""
    run_id = run_id_for(project, spans[0].trace_id)
    stored = [e.to_wire() for e in DjangoStore(project).read(run_id)]
    stored[0]["payload"]["graph_version"] = 1  # which version of the shared graph: not mapped
    return stored, [e.to_wire() for e in map_trace(spans, run_id=run_id).events]


@pytest.mark.django_db
def test_a_request_of_many_traces_is_stored_and_mapped_from_the_backlog(world: World) -> None:
    first, second = _trace(), _trace()
    with override_settings(FORKLAB_OTLP_INLINE_TRACES=1, FORKLAB_TRACE_REMAP_DELAY=0):
        result = import_spans(user=None, project=world.lab, spans=first + second,
                              unreadable=[], defer=True)
        ids = sorted([first[0].trace_id, second[0].trace_id])
        assert result.runs == [run_id_for(world.lab, t) for t in ids]  # named all the same
        assert TraceSpan.objects.filter(project=world.lab).count() == 2 * len(first)
        assert backlog(world.lab) == ids and not Run.objects.filter(pk__in=result.runs)
        # the task (its enqueue waits for a commit this test never makes) runs now
        map_backlog.call(world.lab.pk)
    assert backlog(world.lab) == [] and unmapped_traces(world.lab) == []
    for spans in (first, second):
        stored, expected = _events(world.lab, spans)
        assert stored == expected


@pytest.mark.django_db
def test_a_busy_receiver_defers_even_a_small_request_and_answers_its_partial_success_exactly(
        world: World) -> None:
    request, _ = handmade(unmappable=True)
    with traces._mapping:  # the backlog task is mapping a batch
        answer = world.client("member").post(
            "/v1/traces", data=request.SerializeToString(),
            content_type="application/x-protobuf", headers={"X-Forklab-Project": "lab"})
    assert answer.status_code == 200
    trace = request.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    assert backlog(world.lab) == [trace] and not Run.objects.filter(trace_id=trace).exists()
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    parsed = ExportTraceServiceResponse.FromString(answer.content)
    assert parsed.partial_success.rejected_spans == 1  # decided without mapping
    with override_settings(FORKLAB_TRACE_REMAP_DELAY=0):
        map_backlog.call(world.lab.pk)
    assert Run.objects.filter(trace_id=trace).exists() and backlog(world.lab) == []


@pytest.mark.django_db
def test_a_span_stored_while_the_mapper_works_keeps_its_trace_on_the_backlog(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    spans = _trace()
    late = spans[-1]
    with override_settings(FORKLAB_OTLP_INLINE_TRACES=0):  # store only
        import_spans(user=None, project=world.lab, spans=spans[:-1], unreadable=[],
                     defer=True)
    read = traces._trace_spans

    def read_then_a_request_lands(project: Project, trace_ids: list[str]) -> Any:
        found = read(project, trace_ids)  # the mapper read its marks and spans...
        with override_settings(FORKLAB_OTLP_INLINE_TRACES=0):  # ...then a request stores
            import_spans(user=None, project=project, spans=[late], unreadable=[], defer=True)
        return found

    monkeypatch.setattr(traces, "_trace_spans", read_then_a_request_lands)
    with traces._mapping:
        done = traces._map_traces(world.lab, None, [late.trace_id], wait=False)
    monkeypatch.undo()
    # not taken off, not written from the spans it read: due again one delay later
    assert done == set() and backlog(world.lab) == [late.trace_id]
    assert not Run.objects.filter(pk=run_id_for(world.lab, late.trace_id)).exists()
    with override_settings(FORKLAB_TRACE_REMAP_DELAY=0):
        map_backlog.call(world.lab.pk)
    stored, expected = _events(world.lab, spans)
    assert stored == expected and backlog(world.lab) == []


@pytest.mark.django_db
def test_a_batch_that_fails_writes_no_run_and_keeps_its_traces(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = _trace(), _trace()
    with override_settings(FORKLAB_OTLP_INLINE_TRACES=0):
        import_spans(user=None, project=world.lab, spans=first + second, unreadable=[],
                     defer=True)
    write = traces._Writer.write
    calls = itertools.count()

    def second_write_fails(self: Any, imported: Any, **kwargs: Any) -> str:
        if next(calls) == 1:
            raise RuntimeError("the process died mid-batch")
        return write(self, imported, **kwargs)

    monkeypatch.setattr(traces._Writer, "write", second_write_fails)
    ids = sorted([first[0].trace_id, second[0].trace_id])
    with pytest.raises(RuntimeError), traces._mapping:
        traces._map_traces(world.lab, None, ids, wait=False)
    monkeypatch.undo()
    assert not Run.objects.filter(trace_id__in=ids).exists()  # the first run neither
    assert backlog(world.lab) == ids
    with override_settings(FORKLAB_TRACE_REMAP_DELAY=0):
        map_backlog.call(world.lab.pk)
    assert unmapped_traces(world.lab) == [] and backlog(world.lab) == []


def test_a_backlog_left_by_a_dead_process_is_mapped_by_the_recovery_sweep(
        fresh_world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans stored, then the process died before mapping them or enqueueing their task:
    nothing but the backlog row knows of them (no request for the trace comes again)."""
    spans = _trace()
    monkeypatch.setattr(traces, "_schedule", lambda project_id: None)  # died: no task
    with traces._mapping:  # busy: only stored
        import_spans(user=None, project=fresh_world.lab, spans=spans, unreadable=[],
                     defer=True)
    monkeypatch.undo()
    assert unmapped_traces(fresh_world.lab) == [spans[0].trace_id]
    assert sweep_backlog() == []  # not stale yet: its task may be on its way
    TraceBacklog.objects.update(since=timezone.now() - timedelta(minutes=5))
    assert sweep_backlog() == [fresh_world.lab.pk]  # (a web process's start-up sweep)
    assert drain(timeout=30)
    assert unmapped_traces(fresh_world.lab) == [] and backlog(fresh_world.lab) == []
    stored, expected = _events(fresh_world.lab, spans)
    assert stored == expected


@pytest.mark.django_db
def test_spans_another_process_stored_meanwhile_are_skipped_not_refused(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The request looked its spans up before another process stored some of them (two web
    processes, one trace): the insert skips those; the request stores the rest."""
    spans = _trace()
    import_spans(user=None, project=world.lab, spans=spans[:3], unreadable=[], defer=True)
    stored = traces._stored

    def looked_up_before(project: Project, by_trace: Any) -> Any:
        _, counts = stored(project, by_trace)
        return defaultdict(set), counts  # "none stored yet", as the other process ran late

    monkeypatch.setattr(traces, "_stored", looked_up_before)
    import_spans(user=None, project=world.lab, spans=spans, unreadable=[], defer=True)
    monkeypatch.undo()
    assert TraceSpan.objects.filter(project=world.lab).count() == len(spans)
    stored_events, expected = _events(world.lab, spans)
    assert stored_events == expected


@pytest.mark.django_db
def test_a_trace_that_cannot_be_mapped_does_not_hold_up_the_others(
        world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    good, bad = _trace(), _trace()
    with override_settings(FORKLAB_OTLP_INLINE_TRACES=0):
        import_spans(user=None, project=world.lab, spans=good + bad, unreadable=[],
                     defer=True)
    real = map_trace

    def fails_on_bad(spans: list[SpanRecord], **kwargs: Any) -> Any:
        if spans[0].trace_id == bad[0].trace_id:
            raise ValueError("a bug in the mapping")
        return real(spans, **kwargs)

    monkeypatch.setattr(traces, "map_trace", fails_on_bad)
    with override_settings(FORKLAB_TRACE_REMAP_DELAY=0):
        answer = map_backlog.call(world.lab.pk)
    assert "due in" in answer  # the task ends; the sweep takes the failed one up later
    assert unmapped_traces(world.lab) == [bad[0].trace_id]
    assert backlog(world.lab) == [bad[0].trace_id]  # kept, retried later
    assert TraceBacklog.objects.get(trace_id=bad[0].trace_id).since > timezone.now()
    assert "could not map trace" in caplog.text
