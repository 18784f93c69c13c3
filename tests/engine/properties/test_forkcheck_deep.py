"""``forkcheck --deep`` over generated runs: the metamorphic checks it runs hold on every
recorded run of a correct engine, and they write nothing to the run's store."""

from __future__ import annotations

from typing import Any

from hypothesis import given

from forklab.engine.fork.fidelity import deep_check
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import Harness


@examples(40)
@given(case=graph_cases())
def test_every_metamorphic_check_holds_on_a_generated_run(case: Any) -> None:
    h = Harness()
    base = record_case(case, h)
    runs = base.store.run_ids()
    sent = len(h.world.sent)

    results = deep_check(base.run_id, store=base.store, env=h.env)

    failed = [r.detail for r in results if not r.ok]
    assert not failed, "\n".join(failed)
    assert base.store.run_ids() == runs, "a deep check wrote to the run's store"
    assert len(h.world.sent) == sent, "a deep check performed a real write"
