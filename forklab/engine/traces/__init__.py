"""Runs recorded elsewhere: OTLP traces in (SPEC §8).

:mod:`.otlp` reads an OTLP export (JSON, or protobuf via ``opentelemetry-proto``) into span
records; :mod:`.genai` and :mod:`.openinference` read each dialect's spans into the neutral
call model (:mod:`.observed`); :mod:`.mapping` turns one trace into one run's events — the
same calls, keys and events the tool loop records — plus a synthetic graph. Pure Python.
"""

from forklab.engine.traces.mapping import ImportedRun, map_trace
from forklab.engine.traces.otlp import (
    OtlpDecodeError,
    Rejected,
    SpanRecord,
    decode_protobuf,
    read_otlp_json,
)

__all__ = ["ImportedRun", "OtlpDecodeError", "Rejected", "SpanRecord", "decode_protobuf",
           "map_trace", "read_otlp_json"]
