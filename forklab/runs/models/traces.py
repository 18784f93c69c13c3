"""Spans received from OpenTelemetry exporters (SPEC §8 "In").

An imported run's log is derived from its trace's spans: every span received is kept (once
per project, trace and span id), so a late span re-maps the whole trace into the run.
"""

from __future__ import annotations

from django.db import models

from forklab.runs.models.access import Project


class TraceSpan(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    trace_id = models.CharField(max_length=32)  # hex
    span_id = models.CharField(max_length=16)  # hex
    # forklab.engine.traces.otlp.SpanRecord.to_wire(): the span as received, decoded
    record = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "trace_id", "span_id"],
                                    name="tracespan_unique_span"),
        ]
        indexes = [models.Index(fields=["project", "trace_id"], name="tracespan_trace")]

    def __str__(self) -> str:
        return f"{self.trace_id}/{self.span_id}"


class TraceLogEvent(models.Model):
    """A GenAI log record correlated to a span (content sent as log events): kept so the
    trace's run is re-mapped with it whenever the trace's spans or records change."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    trace_id = models.CharField(max_length=32)  # hex
    span_id = models.CharField(max_length=16)  # hex
    key = models.CharField(max_length=64)  # LogEvent.key: a re-sent record is the same
    # forklab.engine.traces.logs.LogEvent.to_wire()
    record = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "trace_id", "key"],
                                    name="tracelogevent_unique"),
        ]
        indexes = [models.Index(fields=["project", "trace_id"], name="tracelogevent_trace")]

    def __str__(self) -> str:
        return f"{self.trace_id}/{self.span_id} {self.record.get('name')}"


class TraceBacklog(models.Model):
    """A trace whose run may not reflect every span and log record stored for it: the OTLP
    receiver's backlog of traces to (re)map (``forklab.runs.traces``).

    Written in the transaction that stores the trace's spans or records, so a trace that
    was stored is mapped even when the process that stored it died before mapping it (the
    recovery sweep picks the backlog up). ``mark`` changes whenever more arrives; a mapper
    deletes the row only when the mark is still the one it read before reading the spans
    (compare-and-delete), so nothing stored after that read is forgotten."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    trace_id = models.CharField(max_length=32)  # hex
    since = models.DateTimeField()  # first unmapped arrival: due FORKLAB_TRACE_REMAP_DELAY later
    mark = models.CharField(max_length=32)  # a fresh random token per arrival

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "trace_id"],
                                    name="tracebacklog_unique_trace"),
        ]
        indexes = [models.Index(fields=["project", "since"], name="tracebacklog_due")]

    def __str__(self) -> str:
        return f"{self.trace_id} since {self.since:%H:%M:%S}"
