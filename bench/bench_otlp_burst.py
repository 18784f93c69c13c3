"""OTLP receiver under a burst: N concurrent exporters sending spans to a real server.

A real server (daphne serving ``forklab.asgi``, as ``forklab serve`` runs it) on a free
local port, over a fresh SQLite database (``--postgres URL``: a scratch database on that
server, created and dropped). ``--exporters`` threads (default 10) each play an app traced
with OpenTelemetry: agent runs of ``--turns`` tool-calling turns (an ``invoke_agent`` span,
per turn a ``chat`` span with its messages and an ``execute_tool`` span, and a final
``chat`` span), spans made at ``--rate`` spans per second in total (default 1,000) for
``--duration`` seconds (default 60), exported like the SDK's batch span processor does:
every ``--interval`` seconds (default 5, ``OTEL_BSP_SCHEDULE_DELAY``) the finished spans, at
most ``--batch`` (512) a request. A run's root span ends after its calls, so it usually
reaches the server in a later request than they do: every trace arrives in pieces (late
spans, re-mapped).

Requests are sent with the real ``OTLPSpanExporter``
(opentelemetry-exporter-otlp-proto-http, protobuf) when installed, else as raw protobuf
POSTs of ``ExportTraceServiceRequest`` messages (opentelemetry-proto). Every HTTP response
is seen (a requests session hook), retries included.

``--trickle N`` measures the other shape instead: one trace of N spans sent one span per
request (an exporter per span), printing the latency of requests along the trace.

Verified at the end (exit status 1 when not): no 5xx answer, no span lost (the
``TraceSpan`` rows of the project = the spans sent and acknowledged), every trace has its
run, and each run holds every span of its trace (its ``trace.imported`` count; waited for
while the receiver still maps deferred traces). Printed: throughput, request latency
percentiles, the largest client backlog (spans made and not yet acknowledged), what real
apps would have lost — the spans a ``BatchSpanProcessor``'s 2,048-span queue would drop
(modelled: spans made while the app's queue of unsent spans was full) and the exports that
took longer than the exporter's default 10 s timeout — the receiver's backlog when the
last span was acknowledged (traces whose spans are stored but not yet mapped) and how long
after the last ack every run held all its spans (the catch-up).

Run from the repository root: ``.venv/bin/python bench/bench_otlp_burst.py`` (``--help``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

try:  # the real exporter, as an app sends
    from opentelemetry.exporter.otlp.proto.http import trace_exporter as otlp_http
except ImportError:  # pragma: no cover - the raw protobuf path below
    otlp_http = None  # type: ignore[assignment]


# -- the spans ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    trace: int
    span: int
    parent: int | None
    name: str
    start: int
    end: int
    attributes: dict[str, Any]


def agent_run(rng: random.Random, turns: int, at_ns: int) -> list[Span]:
    """One traced agent run: the agent span (last), its turns' chat and tool spans."""
    trace, root = rng.getrandbits(128) or 1, rng.getrandbits(64) or 1
    city = rng.choice(["Paris", "Oslo", "Lima", "Kyoto"])
    spans: list[Span] = []
    t = at_ns
    messages: list[dict[str, Any]] = [{"role": "user", "parts": [
        {"type": "text", "content": f"Weather in {city}?"}]}]
    for turn in range(1, turns + 2):
        last = turn == turns + 1
        call_id = f"call_{turn}"
        reply: dict[str, Any] = {"role": "assistant", "finish_reason": "stop" if last
                                 else "tool_calls", "parts": [
            {"type": "text", "content": f"It is sunny in {city}."} if last else
            {"type": "tool_call", "id": call_id, "name": "get_weather",
             "arguments": {"city": city}}]}
        spans.append(Span(trace, rng.getrandbits(64) or 1, root, "chat gpt-4o-mini", t,
                          t + 2_000_000, {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o-mini", "gen_ai.request.temperature": 0.0,
            "gen_ai.input.messages": json.dumps(messages),
            "gen_ai.output.messages": json.dumps([reply]),
            "gen_ai.tool.definitions": json.dumps([{"type": "function", "name": "get_weather",
                                                    "parameters": {"type": "object"}}]),
            "gen_ai.usage.input_tokens": 20 + 10 * turn, "gen_ai.usage.output_tokens": 8}))
        t += 2_000_000
        if last:
            break
        spans.append(Span(trace, rng.getrandbits(64) or 1, root, "execute_tool get_weather",
                          t, t + 1_000_000, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.arguments": json.dumps({"city": city}),
            "gen_ai.tool.call.result": json.dumps({"sky": "sunny"})}))
        t += 1_000_000
        messages = [*messages, {"role": "assistant", "parts": reply["parts"]},
                    {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id,
                                                "response": {"sky": "sunny"}}]}]
    spans.append(Span(trace, root, None, "invoke_agent weather", at_ns, t, {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"}))
    return spans


class Sender:
    """One exporter: the real OTLPSpanExporter, or raw protobuf POSTs."""

    def __init__(self, endpoint: str, headers: dict[str, str], stats: Stats) -> None:
        import requests

        self.stats = stats
        self.session = requests.Session()
        self.session.hooks["response"].append(self._seen)
        self.endpoint, self.headers = endpoint, headers
        self.exporter = None if otlp_http is None else otlp_http.OTLPSpanExporter(
            endpoint=endpoint, headers=headers, session=self.session, timeout=120)

    def _seen(self, response: Any, *args: Any, **kwargs: Any) -> None:
        self.stats.answer(response.status_code, response.elapsed.total_seconds())

    def send(self, spans: list[Span]) -> bool:
        if self.exporter is not None:
            from opentelemetry.sdk.trace.export import SpanExportResult

            return bool(self.exporter.export([_readable(s) for s in spans])
                        == SpanExportResult.SUCCESS)
        body = _request(spans).SerializeToString()
        response = self.session.post(self.endpoint, data=body, timeout=120, headers={
            **self.headers, "Content-Type": "application/x-protobuf"})
        return bool(response.status_code == 200)


def _readable(span: Span) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    def context(span_id: int) -> SpanContext:
        return SpanContext(span.trace, span_id, is_remote=False,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))

    return ReadableSpan(
        name=span.name, context=context(span.span),
        parent=None if span.parent is None else context(span.parent),
        resource=Resource({"service.name": "bench-app"}), attributes=span.attributes,
        kind=SpanKind.CLIENT if span.parent else SpanKind.INTERNAL,
        start_time=span.start, end_time=span.end,
        instrumentation_scope=InstrumentationScope("bench"))


def _request(spans: list[Span]) -> Any:
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    def value(v: Any) -> dict[str, Any]:
        if isinstance(v, str):
            return {"stringValue": v}
        if isinstance(v, float):
            return {"doubleValue": v}
        return {"intValue": str(v)}

    import base64

    def b64(n: int, size: int) -> str:
        return base64.b64encode(n.to_bytes(size, "big")).decode()

    wire = [{"traceId": b64(s.trace, 16), "spanId": b64(s.span, 8), "name": s.name,
             "kind": 3 if s.parent else 1, "startTimeUnixNano": str(s.start),
             "endTimeUnixNano": str(s.end),
             "attributes": [{"key": k, "value": value(v)} for k, v in s.attributes.items()],
             **({"parentSpanId": b64(s.parent, 8)} if s.parent else {})} for s in spans]
    return ParseDict({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "bench-app"}}]},
        "scopeSpans": [{"scope": {"name": "bench"}, "spans": wire}]}]},
        ExportTraceServiceRequest())


# The SDK's defaults: OTEL_BSP_MAX_QUEUE_SIZE, OTEL_EXPORTER_OTLP_TIMEOUT (seconds)
BSP_QUEUE = 2048
EXPORT_TIMEOUT = 10.0

# -- the load ----------------------------------------------------------------------------


@dataclass
class Stats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: dict[int, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    made: int = 0
    acked: int = 0
    failed: int = 0  # spans of requests the exporter gave up on
    max_backlog: int = 0
    # what a real BatchSpanProcessor (OTEL_BSP_MAX_QUEUE_SIZE 2,048, per app) would have
    # dropped: spans made while its app's queue was full
    queue_drops: int = 0
    # spans of exports that took longer than the exporter's default 10 s timeout
    # (OTEL_EXPORTER_OTLP_TIMEOUT): a real exporter would have given them up
    slow_exports: int = 0
    slow_spans: int = 0
    traces: set[str] = field(default_factory=set)
    spans_of: dict[str, int] = field(default_factory=dict)

    def answer(self, status: int, seconds: float) -> None:
        with self.lock:
            self.statuses[status] = self.statuses.get(status, 0) + 1
            self.latencies.append(seconds)

    def making(self, spans: list[Span]) -> None:
        with self.lock:
            self.made += len(spans)
            for s in spans:
                key = f"{s.trace:032x}"
                self.spans_of[key] = self.spans_of.get(key, 0) + 1
            self.max_backlog = max(self.max_backlog, self.made - self.acked - self.failed)

    def sent(self, spans: list[Span], ok: bool, seconds: float = 0.0) -> None:
        with self.lock:
            if seconds > EXPORT_TIMEOUT:
                self.slow_exports += 1
                self.slow_spans += len(spans)
            if ok:
                self.acked += len(spans)
                self.traces.update(f"{s.trace:032x}" for s in spans)
            else:
                self.failed += len(spans)


def exporter(sender: Sender, stats: Stats, *, rate: float, duration: float, interval: float,
             batch: int, turns: int, seed: int, stop_at: float) -> None:
    """Make spans at ``rate`` per second; every ``interval`` send the finished ones in
    batches of at most ``batch`` (roots are finished last: they go out one flush later)."""
    rng = random.Random(seed)
    per_run = 2 * turns + 2
    ready: list[Span] = []
    held: list[Span] = []  # root spans, ending after their calls
    started = time.monotonic()
    made = 0
    next_flush = started + interval
    while True:
        now = time.monotonic()
        due = min(now, stop_at) - started
        while made + per_run <= rate * due:
            spans = agent_run(rng, turns, time.time_ns())
            stats.making(spans)
            # the app's queue is what it made and has not handed to an export yet: spans
            # made while an export is under way land here after it (this loop sends
            # synchronously, as the SDK's one export thread does)
            room = BSP_QUEUE - len(ready) - len(held)
            if room < len(spans):
                with stats.lock:
                    stats.queue_drops += len(spans) - max(0, room)
            ready.extend(spans[:-1])
            held.append(spans[-1])
            made += per_run
        if now >= next_flush or now >= stop_at:
            out, ready = ready + held[:-1] if now < stop_at else ready + held, []
            held = held[-1:] if now < stop_at else []
            for i in range(0, len(out), batch):
                chunk = out[i:i + batch]
                began = time.monotonic()
                ok = sender.send(chunk)
                stats.sent(chunk, ok, time.monotonic() - began)
            next_flush = now + interval
        if now >= stop_at and not ready and not held:
            return
        time.sleep(min(0.02, max(0.0, next_flush - time.monotonic())))


# -- the server --------------------------------------------------------------------------


def configure(database_url: str, home: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ["FORKLAB_HOME"] = home
    os.environ.setdefault("FORKLAB_LOG_LEVEL", "WARNING")
    os.environ["DJANGO_SETTINGS_MODULE"] = "forklab.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def seed() -> tuple[str, str]:
    """A project and a member's token: ``(project slug, token)``."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from forklab.runs.models import Membership, Project, Role

    slug = f"bench-{uuid.uuid4().hex[:6]}"
    project = Project.objects.create(slug=slug, name="bench")
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:6]}")
    Membership.objects.create(user=user, project=project, role=Role.MEMBER)
    return slug, Token.objects.create(user=user).key


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(port: int, log: Path) -> subprocess.Popen[bytes]:
    """daphne serving forklab on ``port`` (the process ``forklab serve`` becomes); its
    output goes to ``log``."""
    out = log.open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-v", "0", "-b", "127.0.0.1", "-p", str(port),
         "forklab.asgi:application"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=out, stderr=subprocess.STDOUT)
    import requests

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).ok:
                return server
        except requests.RequestException:
            time.sleep(0.2)
    server.terminate()
    raise SystemExit("the server did not answer /healthz within 60 s")


def verify(slug: str, stats: Stats, wait: float) -> list[str]:
    """What did not hold (empty: everything held)."""
    from forklab.runs.models import Event, Project, Run, TraceSpan
    from forklab.runs.traces import unmapped_traces

    problems = []
    project = Project.objects.get(slug=slug)
    deadline = time.monotonic() + wait
    while unmapped_traces(project) and time.monotonic() < deadline:
        time.sleep(0.5)
    fives = {k: v for k, v in stats.statuses.items() if k >= 500}
    if fives:
        problems.append(f"5xx answers: {fives}")
    if stats.failed:
        problems.append(f"{stats.failed} spans the exporter gave up on")
    stored = TraceSpan.objects.filter(project__slug=slug).count()
    if stored != stats.acked:
        problems.append(f"{stored} spans stored, {stats.acked} acknowledged")
    runs = dict(Run.objects.filter(project__slug=slug).exclude(trace_id="")
                .values_list("trace_id", "id"))
    missing = stats.traces - set(runs)
    if missing:
        problems.append(f"{len(missing)} traces without a run")
    counts = {run: payload.get("spans") for run, payload in Event.objects.filter(
        run_id__in=list(runs.values()), type="trace.imported").values_list("run_id", "payload")}
    stale = sum(1 for trace, run in runs.items() if counts.get(run) != stats.spans_of.get(trace))
    if stale:
        problems.append(f"{stale} runs do not hold every span of their trace")
    return problems


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def burst(args: argparse.Namespace, endpoint: str, headers: dict[str, str],
          slug: str) -> int:
    stats = Stats()
    began = time.monotonic()
    stop_at = began + args.duration
    threads = [threading.Thread(target=exporter, args=(Sender(endpoint, headers, stats), stats),
                                kwargs={"rate": args.rate / args.exporters,
                                        "duration": args.duration, "interval": args.interval,
                                        "batch": args.batch, "turns": args.turns,
                                        "seed": args.seed + i, "stop_at": stop_at})
               for i in range(args.exporters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sent_s = time.monotonic() - began
    from forklab.runs.models import Project
    from forklab.runs.traces import unmapped_traces

    # measured once, when the last span is acknowledged (a full count: not during the load)
    receiver_backlog = len(unmapped_traces(Project.objects.get(slug=slug)))
    problems = verify(slug, stats, wait=args.settle)
    mapped_s = time.monotonic() - began
    lat = stats.latencies
    print(f"exporter: {'raw protobuf' if otlp_http is None else 'OTLPSpanExporter (protobuf)'}; "
          f"{args.exporters} exporters, {args.rate:g} spans/s for {args.duration:g} s, "
          f"flush every {args.interval:g} s (≤ {args.batch} spans), "
          f"{2 * args.turns + 2} spans per trace")
    rows = [
        ("spans made / acknowledged", f"{stats.made:,} / {stats.acked:,}"),
        ("traces", f"{len(stats.traces):,}"),
        ("requests (HTTP status: count)",
         ", ".join(f"{k}: {v:,}" for k, v in sorted(stats.statuses.items()))),
        ("throughput (spans acknowledged / s)", f"{stats.acked / sent_s:,.0f}"),
        ("until the last span was acknowledged (s)", f"{sent_s:.1f}"),
        ("until every run was mapped (s)",
         f"{mapped_s:.1f} ({mapped_s - sent_s:.1f} after the last ack)"),
        ("request latency p50 / p95 / p99 / max (ms)",
         " / ".join(f"{1000 * percentile(lat, q):,.0f}" for q in (0.5, 0.95, 0.99, 1.0))),
        ("mean request latency (ms)", f"{1000 * statistics.fmean(lat) if lat else 0:,.0f}"),
        ("max client backlog (spans made, not acknowledged)", f"{stats.max_backlog:,}"),
        (f"spans a {BSP_QUEUE:,}-span BatchSpanProcessor queue would drop",
         f"{stats.queue_drops:,}"),
        (f"exports over the exporter's {EXPORT_TIMEOUT:g} s timeout (their spans)",
         f"{stats.slow_exports:,} ({stats.slow_spans:,})"),
        ("receiver backlog at the last ack (traces not mapped yet)", f"{receiver_backlog:,}"),
    ]
    width = max(len(r[0]) for r in rows)
    for name, v in rows:
        print(f"{name.ljust(width)}  {v}")
    for problem in problems:
        print(f"NOT HELD: {problem}")
    if not problems:
        print("held: no 5xx, no span lost, every trace has its run holding all its spans")
    return 1 if problems else 0


def trickle(args: argparse.Namespace, endpoint: str, headers: dict[str, str],
            slug: str) -> int:
    """One trace of ``--trickle`` spans, one span per request; latency along the trace."""
    stats = Stats()
    sender = Sender(endpoint, headers, stats)
    rng = random.Random(args.seed)
    spans: list[Span] = []
    while len(spans) < args.trickle:
        run = agent_run(rng, turns=(args.trickle - 2) // 2, at_ns=time.time_ns())
        spans = [dataclasses_replace(s, trace=run[0].trace) for s in run]
    spans = spans[:args.trickle]
    times = []
    for span in spans:
        began = time.monotonic()
        if not sender.send([span]):
            print("a request failed")
            return 1
        times.append(time.monotonic() - began)
    sent = time.monotonic()
    stats.sent(spans, True)
    for span in spans:
        stats.spans_of[f"{span.trace:032x}"] = len(spans)
    problems = verify(slug, stats, wait=args.settle)
    marks = sorted({0, len(times) // 4, len(times) // 2, 3 * len(times) // 4, len(times) - 1})
    print(f"one trace of {len(spans)} spans, one span per request: {sum(times):.2f} s of "
          f"requests; its run held every span {time.monotonic() - sent:.1f} s after the last")
    for i in marks:
        window = times[max(0, i - 5):i + 5]
        print(f"  request {i + 1:>6,}: {1000 * statistics.fmean(window):8.1f} ms")
    for problem in problems:
        print(f"NOT HELD: {problem}")
    return 1 if problems else 0


def dataclasses_replace(span: Span, **changes: Any) -> Span:
    import dataclasses

    return dataclasses.replace(span, **changes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exporters", type=int, default=10)
    parser.add_argument("--rate", type=float, default=1000.0, help="spans per second, total")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--interval", type=float, default=5.0,
                        help="seconds between an exporter's flushes (OTEL_BSP_SCHEDULE_DELAY)")
    parser.add_argument("--batch", type=int, default=512, help="spans per request at most")
    parser.add_argument("--turns", type=int, default=2, help="tool-calling turns per run")
    parser.add_argument("--settle", type=float, default=600.0,
                        help="seconds to wait for deferred mapping before verifying")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--trickle", type=int, default=0, metavar="N",
                        help="instead: one trace of N spans sent one span per request")
    parser.add_argument("--postgres", metavar="URL",
                        help="a PostgreSQL server URL (a scratch database is created on it)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = None
        if args.postgres:
            from bench_ws import create_database, drop_database

            scratch = f"forklab_bench_otlp_{os.getpid()}"
            url = create_database(args.postgres, scratch)
        else:
            url = f"sqlite:///{tmp}/bench.sqlite3"
        server = None
        try:
            configure(url, tmp)
            slug, token = seed()
            port = free_port()
            server = serve(port, Path(tmp) / "server.log")
            endpoint = f"http://127.0.0.1:{port}/v1/traces"
            headers = {"Authorization": f"Token {token}", "X-Forklab-Project": slug}
            from django.db import connection

            print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
                  f"{connection.vendor}, daphne; load: {os.getloadavg()[0]:.2f}")
            if args.trickle:
                return trickle(args, endpoint, headers, slug)
            return burst(args, endpoint, headers, slug)
        finally:
            if server is not None:
                server.terminate()
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:  # a background task still mapping
                    server.kill()
                    server.wait(timeout=30)
            from django.db import connections

            connections.close_all()
            if scratch:
                drop_database(args.postgres, scratch)


if __name__ == "__main__":
    raise SystemExit(main())
