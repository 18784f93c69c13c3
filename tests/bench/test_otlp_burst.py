"""bench/bench_otlp_burst.py runs end to end at a tiny load and checks itself.

No timing is asserted (timings belong to the benchmark). What is asserted: the script
starts a real server, sends spans through the real exporter, and its own verification
(no 5xx, no span lost, every trace's run holding all its spans) holds — in the burst and
in the span-per-request trickle, whose large trace is mapped in the background.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_"))}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_otlp_burst.py"), *args],
        cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_a_tiny_burst_is_received_whole() -> None:
    out = _bench("--exporters", "2", "--rate", "60", "--duration", "1.5", "--interval",
                 "0.5", "--settle", "60")
    assert "held: no 5xx, no span lost" in out
    assert "NOT HELD" not in out


def test_a_trickled_trace_past_the_inline_limit_is_mapped_whole() -> None:
    env_limit = {"FORKLAB_TRACE_INLINE_SPANS": "4", "FORKLAB_TRACE_REMAP_DELAY": "0.2"}
    os.environ.update(env_limit)
    try:
        out = _bench("--trickle", "12", "--settle", "60")
    finally:
        for key in env_limit:
            os.environ.pop(key)
    assert "one trace of 12 spans" in out and "NOT HELD" not in out
