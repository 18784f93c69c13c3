"""forklab against activegraph and LangGraph on the same workloads (issue 11).

Run ``python -m bench.peers --help``; what it measures and what it found: docs/benchmarks.md.
"""
