"""``forkcheck`` says exactly what ``fork()`` does (issue 35, class 5; SPEC §3.7).

A check that cries wolf on a healthy database is as useless as one that never fires. At every
point of a generated run — subgraph nodes included, whose fingerprints name their child
graph — ``fork_check`` reports a point ok exactly when the null fork ``fork()`` makes there
reproduces the base without a paid call, and it writes nothing to the run's store.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine import fork
from forklab.engine.canonical import canonical_equals
from forklab.engine.fork.fidelity import fork_check
from tests.engine.properties.graphs import Options, graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import Harness

CHILDREN = Options(singles=("agent", "tool", "subgraph", "subgraph", "approval"))
"""Subgraph nodes drawn twice as often: where a check forking into a bare store went wrong."""


@examples(40)
@given(case=st.one_of(graph_cases(), graph_cases(CHILDREN)))
def test_forkcheck_reports_a_point_ok_exactly_when_its_null_fork_reproduces(case: Any) -> None:
    h = Harness()
    base = record_case(case, h)
    runs = base.store.run_ids()

    checked = fork_check(base.run_id, store=base.store, env=h.env)

    assert base.store.run_ids() == runs, "forkcheck wrote to the run's store"
    for result in checked:
        # the same null fork, as a user makes it
        null = fork(base, at=result.point.address(), policy={"memoize": True},
                    ignore_budget=True)
        assert null.state is not None
        paid = [c for c in null.calls if c["label"] not in ("reused", "simulated")]
        reproduces = canonical_equals(null.state.outcome(), base.state.outcome()) and not paid
        assert result.ok == reproduces, (
            f"forkcheck says {'ok' if result.ok else 'mismatch'} at {result.point.label} but "
            f"fork() {'reproduces' if reproduces else 'does not'}\n{result.detail}")
    assert all(r.ok for r in checked), "\n".join(r.detail for r in checked if not r.ok)

