"""The receiver's re-mapping (docs/traces.md "Storage, re-sends and late spans"): however a
trace's spans are batched, ordered and re-sent — mapped in the request or deferred and
coalesced in the background (``FORKLAB_TRACE_INLINE_SPANS``) — its run ends up with the
events of the whole trace mapped at once, and a request that adds no span re-maps nothing."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forklab.engine.traces import map_trace
from forklab.engine.traces.otlp import SpanRecord
from forklab.runs.models import Event, Project, Run
from forklab.runs.store import DjangoStore
from forklab.runs.task_backends import drain
from forklab.runs.traces import (
    backlog,
    import_spans,
    map_backlog,
    run_id_for,
    unmapped_traces,
)
from tests.api.conftest import World
from tests.traces.spans import handmade
from tests.traces.test_mapping import workflow

_traces = itertools.count(1)


def _fresh_trace() -> list[SpanRecord]:
    """The mapping tests' two-agent workflow under a trace id no other example used."""
    trace = f"{0xbeef:08x}{next(_traces):024x}"
    return [dataclasses.replace(s, trace_id=trace) for s in workflow()]


def _expected(project: Project, spans: list[SpanRecord]) -> list[dict[str, Any]]:
    events = map_trace(spans, run_id=run_id_for(project, spans[0].trace_id)).events
    return [e.to_wire() for e in events]


def _stored(project: Project, run_id: str) -> list[dict[str, Any]]:
    wire = [e.to_wire() for e in DjangoStore(project).read(run_id)]
    wire[0]["payload"]["graph_version"] = 1  # which version of the shared graph: not mapped
    return wire


@st.composite
def batchings(draw: st.DrawFn) -> tuple[list[list[int]], int]:
    """Span indices in some order, some re-sent, cut into requests; an inline limit."""
    n = len(workflow())
    order = draw(st.permutations(range(n)))
    repeats = draw(st.lists(st.integers(0, n - 1), max_size=3))
    sent = [*order, *repeats]
    cuts = sorted(draw(st.sets(st.integers(1, len(sent) - 1), max_size=len(sent) - 1)))
    batches = [sent[a:b] for a, b in itertools.pairwise([0, *cuts, len(sent)])]
    return batches, draw(st.sampled_from([0, 2, 100]))


@pytest.mark.django_db
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=batchings())
def test_any_batching_ends_in_the_events_of_the_whole_trace(
        world: World, case: tuple[list[list[int]], int]) -> None:
    batches, inline = case
    spans = _fresh_trace()
    trace = spans[0].trace_id
    with override_settings(FORKLAB_TRACE_INLINE_SPANS=inline, FORKLAB_TRACE_REMAP_DELAY=0):
        for batch in batches:
            import_spans(user=None, project=world.lab, spans=[spans[i] for i in batch],
                         unreadable=[], defer=True)
        # the backlog task (its enqueue waits for a commit this test never makes) runs now,
        # as the worker runs it
        map_backlog.call(world.lab.pk)
    assert backlog(world.lab) == [] and unmapped_traces(world.lab) == []
    assert _stored(world.lab, run_id_for(world.lab, trace)) == _expected(world.lab, spans)


@pytest.mark.django_db
def test_a_request_that_adds_no_span_rewrites_nothing(world: World) -> None:
    spans = _fresh_trace()
    import_spans(user=None, project=world.lab, spans=spans, unreadable=[], defer=True)
    run_id = run_id_for(world.lab, spans[0].trace_id)
    before = list(Event.objects.filter(run_id=run_id).values_list("id", flat=True))
    for again in (spans, spans[:2], spans[3:]):
        result = import_spans(user=None, project=world.lab, spans=again, unreadable=[],
                              defer=True)
        assert result.runs == [run_id]
    assert list(Event.objects.filter(run_id=run_id).values_list("id", flat=True)) == before


@pytest.mark.django_db
def test_a_run_behind_its_spans_is_caught_up_by_a_re_send(world: World) -> None:
    """A deferred re-map lost with its process: the next request for the trace, even one
    adding nothing, maps it."""
    spans = _fresh_trace()
    import_spans(user=None, project=world.lab, spans=spans[:4], unreadable=[], defer=True)
    with override_settings(FORKLAB_TRACE_INLINE_SPANS=1):
        import_spans(user=None, project=world.lab, spans=spans, unreadable=[], defer=True)
    assert unmapped_traces(world.lab) == [spans[0].trace_id]  # deferred, and never run
    import_spans(user=None, project=world.lab, spans=spans[:1], unreadable=[], defer=True)
    assert unmapped_traces(world.lab) == []
    assert _stored(world.lab, run_id_for(world.lab, spans[0].trace_id)) == _expected(
        world.lab, spans)


def test_a_large_trace_sent_a_span_at_a_time_is_mapped_in_the_background(
        fresh_world: World) -> None:
    """Through the receiver and the task pool: requests past the inline limit only store
    their span; the background re-map catches the run up with every span."""
    early, late = handmade(late=True)
    client = fresh_world.client("member")
    trace = early.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()
    with override_settings(FORKLAB_TRACE_INLINE_SPANS=1, FORKLAB_TRACE_REMAP_DELAY=0.05):
        for body in (early, late):
            answer = client.post("/v1/traces", data=body.SerializeToString(),
                                 content_type="application/x-protobuf",
                                 headers={"X-Forklab-Project": "lab"})
            assert answer.status_code == 200
        assert drain(timeout=30)
    assert unmapped_traces(fresh_world.lab) == []
    run = Run.objects.get(trace_id=trace)
    calls = [e.payload.get("call") for e in Event.objects.filter(run=run,
                                                                 type="agent.requested")]
    assert calls == [None, "turn:2"] and run.status == "completed"


@pytest.mark.django_db
def test_a_receiver_busy_past_its_wait_answers_429_with_retry_after(world: World) -> None:
    """Requests queue for the store ahead of them; past ``FORKLAB_OTLP_WAIT`` the answer
    is OTLP's back-pressure (429, Retry-After: exporters retry), never a 500."""
    from forklab.runs import traces

    request, _ = handmade()
    with override_settings(FORKLAB_OTLP_WAIT=0.05), traces._storing:  # another store
        answer = world.client("member").post(
            "/v1/traces", data=request.SerializeToString(),
            content_type="application/x-protobuf", headers={"X-Forklab-Project": "lab"})
    assert answer.status_code == 429 and int(answer.headers["Retry-After"]) >= 1
    assert not Run.objects.filter(
        trace_id=request.resource_spans[0].scope_spans[0].spans[0].trace_id.hex()).exists()
